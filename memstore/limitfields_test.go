package memstore

import (
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// sameFields is Limit's == written out: changing any one field of a limit
// must make it differ, so a field added to sluice.Limit and not to
// sameFields fails here instead of matching another limit's config.
func TestSameFieldsComparesEveryField(t *testing.T) {
	base := sluice.Limit{Algorithm: sluice.Calendar, Rate: 10, Period: time.Hour, Burst: 3, CountAll: true, Zone: time.UTC}
	if !sameFields(&base, &base) {
		t.Fatal("a limit differs from itself")
	}
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int64, reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Uint8:
			f.SetUint(f.Uint() + 1)
		case reflect.Pointer:
			f.Set(reflect.ValueOf(time.FixedZone("X", 3600)))
		default:
			t.Fatalf("Limit.%s is a %v: teach sameFields and this test to compare it", v.Type().Field(i).Name, f.Kind())
		}
		if other == base {
			t.Fatalf("changing Limit.%s left the limit equal", v.Type().Field(i).Name)
		}
		if sameFields(&base, &other) {
			t.Errorf("sameFields does not compare Limit.%s", v.Type().Field(i).Name)
		}
	}
}
