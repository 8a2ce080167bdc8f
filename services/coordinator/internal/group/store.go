package group

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tributary/tributary/services/coordinator/internal/consumergroup"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// snapshotGroup reads a group and its members without locking, from one snapshot
// (store.SnapshotGroup). A missing group comes back with exists false.
func snapshotGroup(ctx context.Context, st *store.Store, id string) (*group, error) {
	row, members, err := st.SnapshotGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	return fromRows(id, row, members)
}

// lockGroup reads a group and its members under the group row lock, held until tx
// ends. A missing group comes back with exists false.
func lockGroup(ctx context.Context, tx *store.GroupTx, id string) (*group, error) {
	row, members, err := tx.LockGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	g, err := fromRows(id, row, members)
	if err != nil || g.Type != store.GroupTypeConsumer {
		return g, err
	}
	if g.consumerDoc, err = tx.ConsumerGroupDoc(ctx, id); err != nil {
		return nil, err
	}
	g.consumerMembers, err = consumergroup.HasMembers(g.consumerDoc)
	return g, err
}

// fromRows builds a group from its stored rows (row nil: no such group).
func fromRows(id string, row *store.Group, members []store.GroupMember) (*group, error) {
	g := newGroup(id)
	if row == nil {
		return g, nil
	}
	g.exists = true
	g.Type = row.GroupType
	g.State = State(row.State)
	g.Generation, g.ProtocolType, g.Protocol, g.Leader = row.Generation, row.ProtocolType, row.Protocol, row.Leader
	g.Deadline, g.JoinNotBefore, g.EmptySince = row.Deadline, row.JoinNotBefore, row.EmptySince
	if len(row.JoinMembers) > 0 {
		if err := json.Unmarshal(row.JoinMembers, &g.JoinMembers); err != nil {
			return nil, fmt.Errorf("decode join members of group: %w", err)
		}
	}
	for _, r := range members {
		m := &member{
			ID: r.ID, InstanceID: r.InstanceID, ClientID: r.ClientID, ClientHost: r.ClientHost,
			SessionTimeout:   time.Duration(r.SessionTimeoutMs) * time.Millisecond,
			RebalanceTimeout: time.Duration(r.RebalanceTimeoutMs) * time.Millisecond,
			ProtocolType:     r.ProtocolType, Assignment: r.Assignment, Pending: r.Pending,
			AwaitingJoin: r.AwaitingJoin, Synced: r.Synced, Generation: r.Generation,
			SessionDeadline: r.SessionDeadline, JoinedAt: r.JoinedAt,
		}
		for i, n := range r.ProtocolNames {
			p := protocol{Name: n}
			if i < len(r.ProtocolMetadata) {
				p.Metadata = r.ProtocolMetadata[i]
			}
			m.Protocols = append(m.Protocols, p)
		}
		g.members[m.ID] = m
	}
	return g, nil
}

// saveGroup writes back what changed: the group row, then deleted members (first, so
// a static member's replacement does not collide on the instance index), then new and
// changed members. A deleted group's row is removed (members and offsets cascade).
func saveGroup(ctx context.Context, tx *store.GroupTx, g *group) error {
	if g.deleted {
		if g.exists {
			return tx.DeleteGroup(ctx, g.ID)
		}
		return nil
	}
	if g.toClassic {
		if err := tx.ConvertToClassic(ctx, g.ID); err != nil {
			return err
		}
	}
	if g.dirty || !g.exists {
		jm, err := json.Marshal(g.JoinMembers)
		if err != nil {
			return fmt.Errorf("encode join members: %w", err)
		}
		if g.JoinMembers == nil {
			jm = []byte("[]")
		}
		if err := tx.SaveGroup(ctx, &store.Group{ID: g.ID, State: string(g.State), Generation: g.Generation,
			ProtocolType: g.ProtocolType, Protocol: g.Protocol, Leader: g.Leader, Deadline: g.Deadline,
			JoinNotBefore: g.JoinNotBefore, JoinMembers: jm, EmptySince: g.EmptySince}); err != nil {
			return err
		}
		g.exists = true
	}
	for _, m := range g.members {
		if !m.deleted || m.isNew {
			continue
		}
		if err := tx.DeleteGroupMember(ctx, g.ID, m.ID); err != nil {
			return err
		}
	}
	for _, m := range g.members {
		if m.deleted || !m.dirty {
			continue
		}
		names := make([]string, len(m.Protocols))
		metas := make([][]byte, len(m.Protocols))
		for i, p := range m.Protocols {
			names[i] = p.Name
			metas[i] = p.Metadata
			if metas[i] == nil {
				metas[i] = []byte{}
			}
		}
		if err := tx.SaveGroupMember(ctx, g.ID, &store.GroupMember{ID: m.ID, InstanceID: m.InstanceID,
			ClientID: m.ClientID, ClientHost: m.ClientHost,
			SessionTimeoutMs:   int32(m.SessionTimeout / time.Millisecond),
			RebalanceTimeoutMs: int32(m.RebalanceTimeout / time.Millisecond),
			ProtocolType:       m.ProtocolType, ProtocolNames: names, ProtocolMetadata: metas, Assignment: m.Assignment,
			Pending: m.Pending, AwaitingJoin: m.AwaitingJoin, Synced: m.Synced, Generation: m.Generation,
			SessionDeadline: m.SessionDeadline, JoinedAt: m.JoinedAt}); err != nil {
			return err
		}
	}
	return nil
}
