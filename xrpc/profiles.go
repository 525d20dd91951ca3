package xrpc

import (
	"context"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/feeds"
)

// profileView is one author of a page (profiles=true). It carries the
// fields a client shows at the top level (did, handle, displayName,
// description, avatar), and contrail's record shape (uri, cid, collection,
// rkey, value) so contrail clients read it as they read contrail's. A
// field the appview does not know is left out, never null. avatar is the
// blob's CID: the image is served by the author's PDS
// (com.atproto.sync.getBlob?did=…&cid=…) or an image CDN.
type profileView struct {
	DID         string        `json:"did"`
	Handle      string        `json:"handle,omitempty"`
	DisplayName string        `json:"displayName,omitempty"`
	Description string        `json:"description,omitempty"`
	Avatar      string        `json:"avatar,omitempty"`
	URI         string        `json:"uri,omitempty"`
	CID         string        `json:"cid,omitempty"`
	Collection  string        `json:"collection,omitempty"`
	RKey        string        `json:"rkey,omitempty"`
	Value       *profileValue `json:"value,omitempty"`
}

// profileValue is the profile record rebuilt from the stored fields: the
// appview keeps no more of it.
type profileValue struct {
	Type        string    `json:"$type"`
	DisplayName string    `json:"displayName,omitempty"`
	Description string    `json:"description,omitempty"`
	Avatar      *blobJSON `json:"avatar,omitempty"`
}

// blobJSON is a blob reference in atproto JSON.
type blobJSON struct {
	Type     string  `json:"$type"`
	Ref      linkRef `json:"ref"`
	MimeType string  `json:"mimeType"`
	Size     int64   `json:"size"`
}

type linkRef struct {
	Link string `json:"$link"`
}

// hydrate returns one view per distinct author of records, in the order
// they first appear; without a ProfileSource, none.
func (s *Server) hydrate(ctx context.Context, records []feedRecord) ([]profileView, error) {
	out := []profileView{}
	if s.profiles == nil {
		return out, nil
	}
	seen := make(map[string]bool, len(records))
	var dids []syntax.DID
	for _, r := range records {
		if !seen[r.DID] {
			seen[r.DID] = true
			dids = append(dids, syntax.DID(r.DID))
		}
	}
	if len(dids) == 0 {
		return out, nil
	}
	ps, err := s.profiles.Hydrate(ctx, dids)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out = append(out, newProfileView(p))
	}
	return out, nil
}

func newProfileView(p feeds.Profile) profileView {
	v := profileView{DID: p.DID.String(), Handle: p.Handle.String()}
	if !p.Present {
		return v
	}
	f := p.Fields
	v.DisplayName, v.Description = f.DisplayName, f.Description
	v.URI = "at://" + p.DID.String() + "/" + feeds.ProfileCollection.String() + "/" + feeds.ProfileRKey.String()
	v.CID, v.Collection, v.RKey = p.CID, feeds.ProfileCollection.String(), feeds.ProfileRKey.String()
	v.Value = &profileValue{Type: feeds.ProfileCollection.String(), DisplayName: f.DisplayName, Description: f.Description}
	if f.Avatar != nil {
		v.Avatar = f.Avatar.CID
		v.Value.Avatar = &blobJSON{Type: "blob", Ref: linkRef{f.Avatar.CID}, MimeType: f.Avatar.MimeType, Size: f.Avatar.Size}
	}
	return v
}
