package director

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// A task read without its logs is the stored task with Events and Debug
// empty, every other field as stored: what the task views show is the same.
func TestTaskNoLogsIsTheTaskWithoutLogs(t *testing.T) {
	at := time.Date(2000, 1, 1, 0, 0, 1, 5, time.UTC)
	full := Task{ID: 7, Type: "provide_dynamic_disk", Queue: "dynamic_disks", State: TaskError, Description: "provide d",
		Deployment: "dep", User: "u", Args: json.RawMessage(`{"disk_name":"d"}`), Result: json.RawMessage(`{"disk_cid":"c"}`),
		Message: "m", Error: "boom", CreatedAt: at, StartedAt: at.Add(time.Second), EndedAt: at.Add(2 * time.Second),
		Events: []TaskEvent{{Time: at, Stage: "s", Task: "t", State: "failed", Error: "e"}}, Debug: []string{"a", "b"},
		Owner: "o", LeaseExpiresAt: at.Add(time.Minute)}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test task leaves %s zero: fill every field", v.Type().Field(i).Name)
		}
	}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var nl taskNoLogs
	if err := json.Unmarshal(raw, &nl); err != nil {
		t.Fatal(err)
	}
	want := full
	want.Events, want.Debug = nil, nil
	if !reflect.DeepEqual(nl.Task, want) {
		t.Fatalf("without logs:\n got %+v\nwant %+v", nl.Task, want)
	}
}
