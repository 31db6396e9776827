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

// The decoded-task cache answers what a fresh decoding answers: a record
// whose bytes change is decoded again, with or without logs, and what it
// returns shares no slice with the cache (a caller's edit does not leak into
// the next listing).
func TestDecodedTasksFollowTheStoredBytes(t *testing.T) {
	full := Task{ID: 7, State: TaskQueued, Args: json.RawMessage(`{"disk_name":"d"}`),
		Events: []TaskEvent{{Stage: "s"}}, Debug: []string{"a"}}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var c decodedTasks
	for _, logs := range []bool{true, false} {
		got, err := c.task("7", raw, logs)
		if err != nil {
			t.Fatal(err)
		}
		want := full
		if !logs {
			want.Events, want.Debug = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("logs=%v: got %+v, want %+v", logs, got, want)
		}
		got.Args[0] = 'X'
		if logs {
			got.Debug[0] = "edited"
		}
		again, err := c.task("7", raw, logs)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, want) {
			t.Fatalf("logs=%v: a caller's edit reached the cache: %+v", logs, again)
		}
	}
	full.State, full.Error = TaskError, "boom"
	raw2, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.task("7", raw2, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != TaskError || got.Error != "boom" {
		t.Fatalf("changed record answered from the cache: %+v", got)
	}
	if _, err := c.task("8", []byte(`{"id":`), false); err == nil {
		t.Fatal("a broken record decoded without error")
	}
}
