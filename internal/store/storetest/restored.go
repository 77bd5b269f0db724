package storetest

import (
	"maps"
	"slices"

	gb "github.com/contentbackup/contentbackup/api/xmtp/device_sync/group_backup"
)

// RestoredForm is what an import makes of an archived group it did not
// have, written out field by field from the spec (ARCH-015: membership
// state Restored; ARCH-020: every other field, historical metadata
// included, as archived). Tests compare against it rather than against
// store.Restored, the function the import path itself uses, so that a
// change to that function shows. TestRestoredFormListsEveryField fails
// when GroupSave gains a field this does not copy.
func RestoredForm(archived *gb.GroupSave) *gb.GroupSave {
	a := archived
	g := &gb.GroupSave{
		Id:                       slices.Clone(a.Id),
		CreatedAtNs:              a.CreatedAtNs,
		MembershipState:          gb.GroupMembershipStateSave_GROUP_MEMBERSHIP_STATE_SAVE_RESTORED,
		InstallationsLastChecked: a.InstallationsLastChecked,
		AddedByInboxId:           a.AddedByInboxId,
		WelcomeId:                copyOf(a.WelcomeId),
		RotatedAtNs:              a.RotatedAtNs,
		ConversationType:         a.ConversationType,
		DmId:                     copyOf(a.DmId),
		LastMessageNs:            copyOf(a.LastMessageNs),
		MessageDisappearFromNs:   copyOf(a.MessageDisappearFromNs),
		MessageDisappearInNs:     copyOf(a.MessageDisappearInNs),
		PausedForVersion:         copyOf(a.PausedForVersion),
	}
	if m := a.Metadata; m != nil {
		g.Metadata = &gb.ImmutableMetadataSave{CreatorInboxId: m.CreatorInboxId}
	}
	if m := a.MutableMetadata; m != nil {
		g.MutableMetadata = &gb.MutableMetadataSave{
			Attributes:     maps.Clone(m.Attributes),
			AdminList:      slices.Clone(m.AdminList),
			SuperAdminList: slices.Clone(m.SuperAdminList),
		}
	}
	return g
}

func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
