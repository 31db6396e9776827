package storage

import (
	"sync/atomic"
	"time"
	_ "time/tzdata" // IANA zones without depending on the host's tzdata

	"github.com/robfig/cron/v3"
)

// AlwaysOpen as a Window schedule makes every moment part of the window.
const AlwaysOpen = "@always"

// Window is the maintenance window: non-urgent actions may start while it is
// open. Schedule is a standard 5-field cron expression (minute hour
// day-of-month month day-of-week) or a descriptor such as "@daily", read in
// TimeZone; each start opens the window for Duration.
//
// Defined edge cases:
//   - Schedule "" means the default "0 3 * * *" (2 h, UTC); AlwaysOpen means
//     no restriction. An invalid schedule, duration or zone is refused by
//     Validate (the fork treats it as "closed", which stalls growth silently).
//   - A window longer than the time between two starts simply stays open; a
//     weekly 72 h window is open for the whole 72 h (the fork looks back only
//     24 h).
//   - Daylight saving: starts are wall-clock times in TimeZone, each civil
//     start happening exactly once. A start inside a skipped hour (spring
//     forward) is moved forward by the length of the gap (02:30 becomes 03:30);
//     a start inside a repeated hour (fall back) happens at its first
//     occurrence only. (robfig/cron's own Next skips the first and fires the
//     second twice; cpilab uses it only to parse.)
type Window struct {
	Schedule string
	// Duration of each opening (default 2 h; at most 31 days).
	Duration time.Duration
	// TimeZone is an IANA zone name (default UTC).
	TimeZone string

	spec *cron.SpecSchedule
	loc  *time.Location
	// memo remembers the last start nextStart found; validate makes a new
	// one, and copies of the Window share it.
	memo *startMemo
}

// startMemo remembers one answer of nextStart: the controller asks about
// one moment a minute or so later each time, and the answer changes only
// when a window starts or the local date turns. Safe for concurrent use.
type startMemo struct{ last atomic.Pointer[startSpan] }

// startSpan: nextStart(t) = next for every t in [from, next) whose civil
// date in the window's zone is day. nextStart walks civil days from t's
// local date and returns the first start after t; for a t after from
// but before next on the same local date, the same walk passes the same
// starts, all at or before from, until it reaches next.
type startSpan struct {
	from, next time.Time
	day        civilDate
}

type civilDate struct {
	y int
	m time.Month
	d int
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func (w *Window) validate() error {
	if w.Schedule == "" {
		w.Schedule = DefaultWindowSchedule
	}
	if w.Duration == 0 {
		w.Duration = DefaultWindowDuration
	}
	if w.TimeZone == "" {
		w.TimeZone = DefaultTimeZone
	}
	if w.Schedule == AlwaysOpen {
		return nil
	}
	if w.Duration < time.Minute || w.Duration > 31*24*time.Hour {
		return invalidf("maintenanceWindow.duration must be 1m–744h, got %s", w.Duration)
	}
	loc, err := time.LoadLocation(w.TimeZone)
	if err != nil {
		return invalidf("maintenanceWindow.timezone %q: %v", w.TimeZone, err)
	}
	s, err := cronParser.Parse(w.Schedule)
	if err != nil {
		return invalidf("maintenanceWindow.schedule %q: %v", w.Schedule, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return invalidf("maintenanceWindow.schedule %q: use a cron expression or @yearly/@monthly/@weekly/@daily/@hourly, not @every", w.Schedule)
	}
	w.spec, w.loc, w.memo = spec, loc, &startMemo{}
	// A schedule that never fires (e.g. 31 February) is refused too.
	if w.nextStart(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		w.spec = nil
		return invalidf("maintenanceWindow.schedule %q never fires", w.Schedule)
	}
	return nil
}

// searchYears bounds the search for the next start (a leap-day schedule
// fires at least once in 8 years).
const searchYears = 9

const starBit = 1 << 63

// nextStart returns the first start strictly after t, or the zero time. It
// reads t's wall clock only (a monotonic reading is dropped), and answers
// from w.memo when t is in the span of the last answer.
func (w *Window) nextStart(t time.Time) time.Time {
	t = t.Round(0)
	y, m, d := t.In(w.loc).Date()
	day := civilDate{y, m, d}
	if w.memo != nil {
		if sp := w.memo.last.Load(); sp != nil && sp.day == day && !t.Before(sp.from) && t.Before(sp.next) {
			return sp.next
		}
	}
	s := w.searchStart(t, day)
	if w.memo != nil && !s.IsZero() {
		w.memo.last.Store(&startSpan{from: t, next: s, day: day})
	}
	return s
}

// searchStart walks civil days from day (t's local date) and returns the
// first start strictly after t, or the zero time.
func (w *Window) searchStart(t time.Time, cd civilDate) time.Time {
	y, m, d := cd.y, cd.m, cd.d
	day := time.Date(y, m, d, 12, 0, 0, 0, time.UTC) // civil date arithmetic in UTC
	for i := 0; i < searchYears*366; i++ {
		cy, cm, cd := day.Date()
		if w.dayMatches(cd, cm, day.Weekday()) {
			for h := 0; h < 24; h++ {
				if w.spec.Hour&(1<<uint(h)) == 0 {
					continue
				}
				for mi := 0; mi < 60; mi++ {
					if w.spec.Minute&(1<<uint(mi)) == 0 {
						continue
					}
					s := w.civil(cy, cm, cd, h, mi)
					if s.After(t) {
						return s
					}
				}
			}
		}
		day = day.AddDate(0, 0, 1)
	}
	return time.Time{}
}

func (w *Window) dayMatches(dom int, month time.Month, dow time.Weekday) bool {
	if w.spec.Month&(1<<uint(month)) == 0 {
		return false
	}
	domOK := w.spec.Dom&(1<<uint(dom)) != 0
	dowOK := w.spec.Dow&(1<<uint(dow)) != 0
	if w.spec.Dom&starBit != 0 || w.spec.Dow&starBit != 0 {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// civil is the instant of a wall-clock time in w's zone: in a skipped hour
// it moves forward by the gap, in a repeated hour it is the first occurrence.
func (w *Window) civil(y int, m time.Month, d, h, mi int) time.Time {
	s := time.Date(y, m, d, h, mi, 0, 0, w.loc)
	if s.Hour() != h || s.Minute() != mi {
		// In a gap: Go normalised it; take the wall time before the gap plus
		// the distance into the gap, which lands after the gap.
		before := time.Date(y, m, d, h, mi, 0, 0, time.FixedZone("", offsetAt(w.loc, s.Add(-3*time.Hour))))
		return before.In(w.loc)
	}
	// In an overlap, the earlier of the two instants with this wall time.
	if e := s.Add(-time.Hour); e.Hour() == h && e.Minute() == mi && e.Day() == d {
		return e
	}
	return s
}

func offsetAt(loc *time.Location, t time.Time) int {
	_, off := t.In(loc).Zone()
	return off
}

// Open reports whether the window is open at t. A Window that has not been
// validated is closed.
func (w *Window) Open(t time.Time) bool {
	if w.Schedule == AlwaysOpen {
		return true
	}
	if w.spec == nil {
		return false
	}
	// Open iff some start s has t-Duration < s ≤ t: each opening is [s, s+Duration).
	s := w.nextStart(t.Add(-w.Duration))
	return !s.IsZero() && !s.After(t)
}

// Next returns when the window next opens after t (t itself when open).
func (w *Window) Next(t time.Time) time.Time {
	if w.Open(t) {
		return t
	}
	if w.spec == nil {
		return time.Time{}
	}
	return w.nextStart(t)
}
