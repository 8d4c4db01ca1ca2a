package batch

import "reflect"

// Rejected reports whether err is an OTLP partial success: the backend
// accepted the export but rejected n of its spans (n is 0 when it only
// warned). The OpenTelemetry specification has the request succeed then,
// and forbids retrying it, yet the SDK's OTLP trace exporters return it as
// an error (their PartialSuccess, in an internal package; otlpwire wraps
// it as they do). The Processor counts the n spans as dropped and the rest
// as exported, where taking the error for a failed export would count the
// whole batch as lost.
//
// The error is recognised by its shape, wherever it is in err's tree: a
// struct named PartialSuccess with an int64 field RejectedItems.
func Rejected(err error) (n int64, ok bool) {
	if err == nil {
		return 0, false
	}
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct && v.Type().Name() == "PartialSuccess" {
		if f := v.FieldByName("RejectedItems"); f.IsValid() && f.Kind() == reflect.Int64 {
			return f.Int(), true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return Rejected(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if n, ok := Rejected(e); ok {
				return n, true
			}
		}
	}
	return 0, false
}
