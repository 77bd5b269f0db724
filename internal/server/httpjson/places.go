package httpjson

import "net/http"

// httpError answers as the Connect protocol answers an error: JSON with
// its string code, the shape every error of the listener has.
// takeCallerPlace takes one of who's body places, if it has one left.
// takeBodyPlaces takes one of who's places for a body and one of the
// server's, or refuses the request (429 past the caller's, 503 past the
// server's) before a byte of its body is read.
func (d *door) takeBodyPlaces(w http.ResponseWriter, who string) (leave func(), ok bool) {
	if !d.takeCallerPlace(who) {
		w.Header().Set("Retry-After", "1")
		refuse(w, http.StatusTooManyRequests, "resource_exhausted", "this caller is sending as many request bodies at once as it may; retry when one ends")
		return nil, false
	}
	select {
	case d.bodies <- struct{}{}:
		return func() { <-d.bodies; d.giveCallerPlace(who) }, true
	default:
		d.giveCallerPlace(who)
		w.Header().Set("Retry-After", "1")
		refuse(w, http.StatusServiceUnavailable, "unavailable", "the server is reading as many request bodies as it may; retry")
		return nil, false
	}
}

func (d *door) takeCallerPlace(who string) bool {
	d.callersMu.Lock()
	defer d.callersMu.Unlock()
	if d.callers[who] >= d.limits.MaxBodiesPerCaller {
		return false
	}
	d.callers[who]++
	return true
}

func (d *door) giveCallerPlace(who string) {
	d.callersMu.Lock()
	defer d.callersMu.Unlock()
	if d.callers[who]--; d.callers[who] <= 0 {
		delete(d.callers, who)
	}
}

// chargeInflation takes a compressed body's room from the server-wide
// memory budget before a byte of it is read: the transcoder inflates a
// message whole, up to maxBody, before the gRPC server sees it. Without
// room the request is refused 429.
func (d *door) chargeInflation(w http.ResponseWriter) (release func(), ok bool) {
	if d.limits.Memory == nil {
		return func() {}, true
	}
	inflated := d.limits.Memory.NewCall("decompressed request", d.maxBody)
	if err := inflated.Charge(d.maxBody); err != nil {
		w.Header().Set("Retry-After", "1")
		refuse(w, http.StatusTooManyRequests, "resource_exhausted",
			"the server's memory budget has no room now to decompress a request body; retry, or send it uncompressed")
		return nil, false
	}
	return inflated.Close, true
}
