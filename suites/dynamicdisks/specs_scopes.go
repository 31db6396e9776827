package dynamicdisks

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	. "github.com/onsi/ginkgo/v2"

	"github.com/cpilab/cpilab/director"
)

// scopeCaller is one token of the scope matrix.
type scopeCaller struct {
	set    string   // the ScopeSets name, "none" or "forged"
	scopes []string // what it holds (nil: no valid token)
	who    *caller
}

// forgedToken is a well-formed bearer token claiming bosh.admin, signed
// with a key the director never saw.
func forgedToken() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	now := time.Now() // the suite's own clock: the token must look current
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"scope": []string{director.ScopeAdmin}, "sub": "admin", "iss": "cpilab-director", "user_name": "admin",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": "forged",
	}).SignedString(key)
}

// scopeCallers are the matrix's tokens: admin first (it shows whether the
// director has GET /dynamic_disks/:name), then every other scope set the
// run has credentials for, no credentials, and a forged token.
func (r *run) scopeCallers() ([]scopeCaller, []string) {
	GinkgoHelper()
	var out []scopeCaller
	var missing []string
	names := ScopeSetNames()
	slices.SortStableFunc(names, func(a, b string) int {
		return map[bool]int{true: 0, false: 1}[a == director.ScopeAdmin] - map[bool]int{true: 0, false: 1}[b == director.ScopeAdmin]
	})
	for _, n := range names {
		c, ok := r.s.scoped[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		out = append(out, scopeCaller{set: n, scopes: ScopeSets[n], who: c})
	}
	tok, err := forgedToken()
	if err != nil {
		Fail("forging a token: " + err.Error())
	}
	forged, err := r.s.newCaller("a forged token", tok)
	if err != nil {
		Fail(err.Error())
	}
	out = append(out, scopeCaller{set: "none", who: r.s.anon}, scopeCaller{set: "forged", who: forged})
	return out, missing
}

func scopeSpecs(r *run) {
	It(ClauseScopeMatrix, labels("auth", "list", "create", "provide", "attach", "detach", "delete"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		callers, missing := r.scopeCallers()
		for _, sc := range callers {
			name := r.mname("scope-" + strings.NewReplacer(".", "-", "+", "-").Replace(sc.set))
			for _, route := range Routes {
				r.scopeCheck(ctx, sc, route, name)
			}
		}
		if len(missing) > 0 {
			Skip(fmt.Sprintf("not checked: each scope alone: no credentials for the scope sets %s (give a user for each: --users)", strings.Join(missing, ", ")))
		}
	})
}

// scopeCheck sends route as sc and checks the answer against the model's
// authorisation table: a route the token may call answers as the model
// allows (a task judged by the model); any other answers 401 (with the
// Director's code 600000 for a valid token lacking the scope), and
// changes nothing.
func (r *run) scopeCheck(ctx context.Context, sc scopeCaller, route Route, name string) {
	GinkgoHelper()
	if route == RouteGet && r.noGetRoute {
		return // upstream has no GET /dynamic_disks/:name
	}
	allowed := sc.scopes != nil && Authorized(route, sc.scopes)
	var x *Exchange
	var op *Op
	switch route {
	case RouteList:
		x = r.s.send(ctx, sc.who, http.MethodGet, "/dynamic_disks", nil, "")
	case RouteGet:
		if len(r.m.Disks) == 0 {
			return // nothing to look up
		}
		x = r.s.send(ctx, sc.who, http.MethodGet, diskPath(sortedNames(r.m)[0], ""), nil, "")
	case RouteTasks:
		x = r.s.send(ctx, sc.who, http.MethodGet, "/tasks?limit=1", nil, "")
	default:
		// provide and attach name no instance: their tasks fail at once
		// (the agent is not asked), which shows the route granted.
		o := Op{Name: name, Instance: r.cfg.RunID + "-no-such-instance", Deployment: r.deployment, AZ: r.a.AZ,
			Pool: r.cfg.DiskPool, SizeMiB: r.cfg.DiskSizeMiB}
		o.Kind = map[Route]OpKind{RouteCreate: OpCreate, RouteProvide: OpProvide, RouteAttach: OpAttach, RouteDetach: OpDetach, RouteDelete: OpDelete}[route]
		op = &o
		prev := r.s.disks
		r.s.disks = sc.who // sendOp speaks as the disk caller
		x = r.sendOp(ctx, o)
		r.s.disks = prev
	}
	clause := ClauseScopeMatrix
	who := fmt.Sprintf("a token holding %s", sc.set)
	switch sc.set {
	case "none":
		who = "no credentials"
	case "forged":
		who = "a forged token (claims bosh.admin, signed with another key)"
	}
	if x.Err != nil {
		violatef(clause, x, "%s on %s: no answer", who, route)
	}
	if !allowed {
		if x.Status != http.StatusUnauthorized {
			violatef(clause, x, "answered HTTP %d to %s on %s; want 401: the route needs %s", x.Status, who, route, needs(route))
		}
		if sc.scopes != nil {
			var eb errorBody
			if json.Unmarshal(x.Answer, &eb) != nil || eb.Code != scopeErrorCode || !strings.HasPrefix(eb.Description, "Require one of the scopes: ") {
				violatef(clause, x, "the 401 to %s on %s is not the Director's {\"code\": %d, \"description\": \"Require one of the scopes: …\"}", who, route, scopeErrorCode)
			}
		}
		if op != nil {
			r.compare(ctx, clause, x)
		}
		return
	}
	switch {
	case route == RouteGet && x.Status == http.StatusNotFound && !r.sawGetRoute:
		r.noGetRoute = true
	case op != nil:
		ok, cid := r.judge(ctx, clause, *op, x)
		r.apply(*op, ok, cid)
		r.compare(ctx, clause, x)
	case x.Status == http.StatusUnauthorized || x.Status == http.StatusForbidden:
		violatef(clause, x, "refused %s on %s, which it grants", who, route)
	case x.Status != http.StatusOK:
		violatef(clause, x, "answered HTTP %d to %s on %s; want 200", x.Status, who, route)
	case route == RouteGet:
		r.sawGetRoute = true
	}
}

// needs says which scopes grant route.
func needs(route Route) string {
	var parts []string
	for _, set := range routeScopes[route] {
		parts = append(parts, strings.Join(set, " and "))
	}
	return director.ScopeAdmin + " or " + strings.Join(parts, " or ")
}
