package storetest

import (
	"errors"
	"fmt"
	"testing"

	mb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/message_backup"
	"github.com/contentbackup/contentbackup/internal/store"
)

// testStreamMessages: StreamMessages hands over, in order, exactly the
// page ListMessages returns, with the same Full; an error of fn stops it
// and comes back as it is.
func testStreamMessages(t *testing.T, s store.Store) {
	owner := Owner("stream")
	mustPut(t, s, owner, minimalGroup("g"))
	msgs := Messages("m", []byte("g"), 50, 1)
	for i, m := range msgs {
		m.DecryptedMessageBytes = make([]byte, 100+i)
	}
	mustAppend(t, s, owner, msgs...)
	for _, q := range []store.MessageQuery{
		{GroupID: []byte("g"), Limit: 20},
		{GroupID: []byte("g"), Limit: 100, MaxBytes: 1000},
		{GroupID: []byte("g"), Limit: 100, MaxBytes: 1},
		{GroupID: []byte("g"), Limit: 10, After: &store.MessageCursor{SentAtNs: msgs[30].GetSentAtNs(), ID: msgs[30].GetId()}},
	} {
		page, err := s.ListMessages(ctx(t), owner, q)
		if err != nil {
			t.Fatal(err)
		}
		var streamed []*mb.GroupMessageSave
		full, err := s.StreamMessages(ctx(t), owner, q, func(m *mb.GroupMessageSave) error {
			streamed = append(streamed, m)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		equal(t, fmt.Sprintf("streamed page of %+v", q), streamed, page.Messages)
		if full != page.Full {
			t.Errorf("full %v, ListMessages says %v", full, page.Full)
		}
	}
	stop := errors.New("stop")
	n := 0
	_, err := s.StreamMessages(ctx(t), owner, store.MessageQuery{GroupID: []byte("g"), Limit: 100}, func(*mb.GroupMessageSave) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Errorf("a stopping fn: %v after %d messages", err, n)
	}
}
