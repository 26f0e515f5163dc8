package store

import (
	"testing"
	"time"
)

// FuzzMonthEnd feeds the reader of the event logs' partition ids any id.
// It takes six digits whose last two are a month 01..12, and only those
// (so an id it takes is safe to splice into ALTER ... DROP PARTITION), as
// the start of the next UTC month, in which the id's month reads back; of
// any time, the partition toYYYYMM puts it in ends after it and begins at
// or before it, so a partition that ends at or before a time holds no
// event from it on.
func FuzzMonthEnd(f *testing.F) {
	for _, id := range []string{"202401", "202412", "000001", "999912", "202400", "202413", "20241", "2024011", "2024-1", "２０２４０１", "202401\n", "+20401", ""} {
		f.Add(id, int64(1767225600000))
	}
	f.Add("197001", int64(-1))
	f.Add("999912", int64(253402300799999))
	f.Fuzz(func(t *testing.T, id string, ms int64) {
		end, err := monthEnd(id)
		sixDigits := len(id) == 6
		for i := 0; sixDigits && i < 6; i++ {
			sixDigits = id[i] >= '0' && id[i] <= '9'
		}
		month := 0
		if sixDigits {
			month = int(id[4]-'0')*10 + int(id[5]-'0')
		}
		if (err == nil) != (sixDigits && month >= 1 && month <= 12) {
			t.Fatalf("monthEnd(%q) = %v, %v", id, end, err)
		}
		if err == nil {
			start := end.AddDate(0, -1, 0)
			if end.Location() != time.UTC || end.Day() != 1 || end.Hour() != 0 || end.Minute() != 0 || end.Second() != 0 || end.Nanosecond() != 0 || start.Format("200601") != id {
				t.Fatalf("monthEnd(%q) = %v, which is not the start of the month after", id, end)
			}
		}

		at := time.UnixMilli(ms).UTC()
		if at.Year() < 0 || at.Year() > 9999 {
			return // toYYYYMM has no six-digit id for it
		}
		part := at.Format("200601")
		end, err = monthEnd(part)
		if err != nil || !end.After(at) || end.AddDate(0, -1, 0).After(at) {
			t.Fatalf("an event at %v is in partition %s, which ends at %v, %v", at, part, end, err)
		}
	})
}
