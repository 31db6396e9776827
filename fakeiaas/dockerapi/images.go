package dockerapi

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"

	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/system"

	"github.com/cpilab/cpilab/fakeiaas"
)

// ImageMember is the tar member of an imported image that holds the
// fakeiaas stemcell image (the small JSON of fixtures/stemcells: name,
// version, api_version, agent). An image without it becomes a stemcell
// named after its repository, version its tag, api_version 1.
const ImageMember = "cpilab-stemcell.json"

func (f *Face) version(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, system.VersionResponse{
		Platform:      system.PlatformInfo{Name: "cpilab fakeiaas Docker face"},
		Version:       "cpilab",
		APIVersion:    f.cfg.MaxAPIVersion,
		MinAPIVersion: f.cfg.MinAPIVersion,
		Os:            "linux",
		Arch:          "amd64",
		GoVersion:     runtime.Version(),
	})
	return nil
}

// imageCreate serves POST /images/create: import (fromSrc=-, the body is
// the image's tar) or pull (fromImage=…), which the face refuses: it has
// no registry to pull from.
func (f *Face) imageCreate(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if q.Get("fromSrc") != "-" {
		if from := q.Get("fromImage"); from != "" {
			return errorf(http.StatusNotFound, "pull access denied for %s: cpilab's Docker face has no registry; import the image instead (POST /images/create?fromSrc=-)", from)
		}
		return errorf(http.StatusBadRequest, "POST /images/create: want fromSrc=- (import from the request body); got fromSrc=%q", q.Get("fromSrc"))
	}
	repo, tag := q.Get("repo"), q.Get("tag")
	if repo == "" {
		return errorf(http.StatusBadRequest, "POST /images/create: repo is required: the face names images repo:tag")
	}
	if i := strings.LastIndex(repo, ":"); i > 0 && !strings.Contains(repo[i:], "/") && tag == "" {
		repo, tag = repo[:i], repo[i+1:]
	}
	if tag == "" {
		tag = "latest"
	}
	ref := repo + ":" + tag
	img, err := readImage(io.LimitReader(r.Body, f.cfg.MaxImageBytes+1), f.cfg.MaxImageBytes, repo, tag)
	if err != nil {
		return err
	}
	props, _ := json.Marshal(map[string]any{imageKey: map[string]string{"ref": ref}})
	f.mu.Lock()
	defer f.mu.Unlock()
	if old := f.images[ref]; old != nil {
		// Docker moves the tag to the new image; the old stemcell stays
		// untagged, as in Docker, but the face forgets it.
		delete(f.images, ref)
	}
	sc, err := f.cloud.CreateStemcell(reqCtx(r, "image_import"), fakeiaas.StemcellSpec{ImagePath: "docker-import:" + ref, Image: img, CloudProperties: props})
	if err != nil {
		return engineErr("import "+ref, err)
	}
	f.images[ref] = &imageRec{Ref: ref, Stemcell: sc.CID, Created: sc.Created.UTC().Format(timeLayout)}
	writeJSON(w, http.StatusOK, jsonstream.Message{Status: sc.CID.String()})
	return nil
}

// readImage reads an image tar and returns the fakeiaas stemcell image it
// carries (ImageMember) or a default one.
func readImage(body io.Reader, max int64, repo, tag string) (json.RawMessage, error) {
	tr := tar.NewReader(body)
	var found json.RawMessage
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errorf(http.StatusInternalServerError, "import %s:%s: the body is not a tar archive: %v", repo, tag, err)
		}
		total += h.Size
		if total > max {
			return nil, errorf(http.StatusRequestEntityTooLarge, "import %s:%s: the image is larger than %d bytes (Config.MaxImageBytes)", repo, tag, max)
		}
		if strings.TrimPrefix(h.Name, "./") == ImageMember {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "import %s:%s: reading %s: %v", repo, tag, ImageMember, err)
			}
			if !json.Valid(b) {
				return nil, errorf(http.StatusBadRequest, "import %s:%s: %s is not JSON", repo, tag, ImageMember)
			}
			found = b
		}
	}
	if found == nil {
		found, _ = json.Marshal(map[string]any{"name": repo, "version": tag, "api_version": 1})
	}
	return found, nil
}

func (f *Face) lookupImageLocked(ref string) *imageRec {
	if im := f.images[ref]; im != nil {
		return im
	}
	if !strings.Contains(ref, ":") {
		if im := f.images[ref+":latest"]; im != nil {
			return im
		}
	}
	for _, im := range f.images {
		if im.Stemcell.String() == ref {
			return im
		}
	}
	return nil
}

func (f *Face) imageInspect(w http.ResponseWriter, r *http.Request) error {
	name, ok := strings.CutSuffix(r.PathValue("name"), "/json")
	if !ok {
		return errorf(http.StatusNotFound, "page not found: GET /images/%s", r.PathValue("name"))
	}
	f.mu.Lock()
	im := f.lookupImageLocked(name)
	f.mu.Unlock()
	if im == nil {
		return errorf(http.StatusNotFound, "No such image: %s", name)
	}
	writeJSON(w, http.StatusOK, image.InspectResponse{
		ID: im.Stemcell.String(), RepoTags: []string{im.Ref}, Created: im.Created, Os: "linux", Architecture: "amd64",
	})
	return nil
}

// imageList serves GET /images/json: each image with its Id and RepoTags.
func (f *Face) imageList(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []image.Summary{}
	for _, ref := range sortedKeys(f.images) {
		im := f.images[ref]
		out = append(out, image.Summary{ID: im.Stemcell.String(), RepoTags: []string{im.Ref}, RepoDigests: []string{}, Labels: map[string]string{}})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (f *Face) imageRemove(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	f.mu.Lock()
	defer f.mu.Unlock()
	im := f.lookupImageLocked(name)
	if im == nil {
		return errorf(http.StatusNotFound, "No such image: %s", name)
	}
	if !boolParam(r, "force") {
		for _, c := range f.containers {
			if c.Config != nil && f.lookupImageLocked(c.Config.Image) == im {
				return errorf(http.StatusConflict, "conflict: unable to remove repository reference %q (must force) - container %s is using its referenced image %s", im.Ref, c.VM, im.Stemcell)
			}
		}
	}
	if err := f.cloud.DeleteStemcell(reqCtx(r, "image_remove"), im.Stemcell); err != nil {
		return engineErr("remove image "+im.Ref, err)
	}
	delete(f.images, im.Ref)
	writeJSON(w, http.StatusOK, []image.DeleteResponse{{Untagged: im.Ref}, {Deleted: im.Stemcell.String()}})
	return nil
}
