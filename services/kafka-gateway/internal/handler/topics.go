package handler

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// coordTimeout bounds one coordinator call made on behalf of a Kafka request.
const coordTimeout = 10 * time.Second

// topicInfo is a topic as the coordinator registered it.
type topicInfo struct {
	Name       string
	ID         [16]byte
	Partitions int32
	Configs    map[string]string
	// Internal marks a Kafka internal topic (internalTopic): listed, never stored.
	Internal bool
}

func topicFromProto(t *coordinatorv1.Topic) *topicInfo {
	ti := &topicInfo{Name: t.GetName(), Partitions: t.GetPartitions(), Configs: t.GetConfigs()}
	copy(ti.ID[:], t.GetTopicId())
	return ti
}

type cacheEntry struct {
	info *topicInfo
	at   time.Time
}

// topicCache keeps GetTopics answers for ttl. invalidate bumps a generation so that an
// answer fetched before an invalidation is not stored after it.
//
// Topic ids that name no topic are cheap to ask about again (ShareFetch and
// ShareAcknowledge name partitions by id on every request, Fetch v13+ too): such an id
// is remembered missing for missTTL, and while a full listing is younger than
// listEvery (and nothing was invalidated since) an id absent from it is missing
// without listing again, so unknown ids cost at most one full listing per listEvery.
type topicCache struct {
	ttl       time.Duration
	missTTL   time.Duration
	listEvery time.Duration

	mu     sync.Mutex
	gen    uint64
	byName map[string]cacheEntry
	byID   map[[16]byte]string
	// missing holds ids a lookup found no topic for, with when it looked.
	missing map[[16]byte]time.Time
	// listedAt is when the last full listing was stored, at generation listedGen.
	listedAt  time.Time
	listedGen uint64

	// listMu serializes the full listings topicByID makes, so that concurrent misses
	// share one.
	listMu sync.Mutex
}

// Bounds of the unknown topic id cache.
const (
	topicIDMissTTL   = 2 * time.Second
	topicIDListEvery = time.Second
	maxMissingIDs    = 10_000
)

func newTopicCache(ttl time.Duration) *topicCache {
	return &topicCache{ttl: ttl, missTTL: min(topicIDMissTTL, ttl), listEvery: min(topicIDListEvery, ttl/2),
		byName: map[string]cacheEntry{}, byID: map[[16]byte]string{}, missing: map[[16]byte]time.Time{}}
}

// knownMissing says whether id was found to name no topic less than missTTL ago, or is
// absent from a full listing younger than listEvery with nothing invalidated since
// (that listing stored every topic, so a topic with id would be cached).
func (c *topicCache) knownMissing(id [16]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.missing[id]; ok && time.Since(at) < c.missTTL {
		return true
	}
	if c.listedGen == c.gen && !c.listedAt.IsZero() && time.Since(c.listedAt) < c.listEvery {
		if _, cached := c.byID[id]; !cached {
			c.markMissingLocked(id)
			return true
		}
	}
	return false
}

// markMissing records that id names no topic.
func (c *topicCache) markMissing(id [16]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.markMissingLocked(id)
}

func (c *topicCache) markMissingLocked(id [16]byte) {
	if len(c.missing) >= maxMissingIDs {
		now := time.Now()
		for k, at := range c.missing {
			if now.Sub(at) >= c.missTTL {
				delete(c.missing, k)
			}
		}
		if len(c.missing) >= maxMissingIDs {
			c.missing = map[[16]byte]time.Time{}
		}
	}
	c.missing[id] = time.Now()
}

func (c *topicCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *topicCache) get(name string) (*topicInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byName[name]
	if !ok || time.Since(e.at) > c.ttl {
		return nil, false
	}
	return e.info, true
}

// getStale returns a cached topic however old (used while the coordinator is down).
func (c *topicCache) getStale(name string) (*topicInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byName[name]
	if !ok {
		return nil, false
	}
	return e.info, true
}

// byIDStale resolves a topic id from the cache however old.
func (c *topicCache) byIDStale(id [16]byte) (*topicInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	e, ok := c.byName[n]
	if !ok {
		return nil, false
	}
	return e.info, true
}

func (c *topicCache) nameForID(id [16]byte) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.byID[id]
	if !ok {
		return "", false
	}
	e, ok := c.byName[n]
	if !ok || time.Since(e.at) > c.ttl {
		return "", false
	}
	return n, true
}

// put stores infos fetched at generation gen, unless an invalidation happened since.
func (c *topicCache) put(gen uint64, infos ...*topicInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	now := time.Now()
	for _, ti := range infos {
		if old, ok := c.byName[ti.Name]; ok && old.info.ID != ti.ID {
			delete(c.byID, old.info.ID)
		}
		c.byName[ti.Name] = cacheEntry{info: ti, at: now}
		c.byID[ti.ID] = ti.Name
		delete(c.missing, ti.ID)
	}
}

// putAll stores a full listing fetched at generation gen: every topic there is.
func (c *topicCache) putAll(gen uint64, infos []*topicInfo) {
	c.put(gen, infos...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.listedAt, c.listedGen = time.Now(), gen
	}
}

func (c *topicCache) invalidate(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	// A topic changed (created elsewhere, say): ids found missing may name it now.
	c.missing = map[[16]byte]time.Time{}
	if name == "" {
		c.byName = map[string]cacheEntry{}
		c.byID = map[[16]byte]string{}
		return
	}
	if e, ok := c.byName[name]; ok {
		delete(c.byID, e.info.ID)
		delete(c.byName, name)
	}
}

// getTopics returns the registered topics among names: fresh cache entries, and one
// GetTopics call for the others (for all of them when force is set). Names that do not
// exist are absent from the map. err is the coordinator's failure, if any; cached topics
// are still returned then, expired ones included (stale beats unavailable).
func (h *Handler) getTopics(ctx context.Context, names []string, force bool) (map[string]*topicInfo, error) {
	out := make(map[string]*topicInfo, len(names))
	var miss []string
	for _, n := range names {
		if _, dup := out[n]; dup {
			continue
		}
		if !force {
			if ti, ok := h.topics.get(n); ok {
				out[n] = ti
				continue
			}
		}
		miss = append(miss, n)
	}
	if len(miss) == 0 {
		return out, nil
	}
	if h.coord == nil {
		return out, status503()
	}
	gen := h.topics.generation()
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	resp, err := h.coord.GetTopics(cctx, &coordinatorv1.GetTopicsRequest{Names: miss})
	if err != nil {
		h.log.Warn("coordinator GetTopics failed", zap.Int("topics", len(miss)), zap.Error(err))
		// Serve what we knew, however old, while the coordinator is away.
		for _, n := range miss {
			if ti, ok := h.topics.getStale(n); ok {
				out[n] = ti
			}
		}
		return out, err
	}
	var found []*topicInfo
	for _, t := range resp.GetTopics() {
		if t.GetErrorCode() != 0 {
			continue
		}
		ti := topicFromProto(t)
		out[ti.Name] = ti
		found = append(found, ti)
	}
	h.topics.put(gen, found...)
	return out, nil
}

// allTopics lists every registered topic (and refreshes the cache with them).
func (h *Handler) allTopics(ctx context.Context) ([]*topicInfo, error) {
	if h.coord == nil {
		return nil, status503()
	}
	gen := h.topics.generation()
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	resp, err := h.coord.GetTopics(cctx, &coordinatorv1.GetTopicsRequest{All: true})
	if err != nil {
		h.log.Warn("coordinator GetTopics(all) failed", zap.Error(err))
		return nil, err
	}
	out := make([]*topicInfo, 0, len(resp.GetTopics()))
	for _, t := range resp.GetTopics() {
		if t.GetErrorCode() != 0 {
			continue
		}
		out = append(out, topicFromProto(t))
	}
	h.topics.putAll(gen, out)
	return out, nil
}

// topicByID resolves a topic id (Fetch v13+, Metadata v10+, DeleteTopics v6+,
// ShareFetch, ShareAcknowledge). It returns nil, nil when no topic has that id. An id
// that is not cached costs a full topic listing, but one that names no topic does
// not again for a while (topicCache.knownMissing), and concurrent misses share one
// listing.
func (h *Handler) topicByID(ctx context.Context, id [16]byte) (*topicInfo, error) {
	if ti, ok := h.topicByIDCached(id); ok {
		return ti, nil
	}
	if h.topics.knownMissing(id) {
		return nil, nil
	}
	h.topics.listMu.Lock()
	defer h.topics.listMu.Unlock()
	// Another caller may have listed while this one waited.
	if ti, ok := h.topicByIDCached(id); ok {
		return ti, nil
	}
	if h.topics.knownMissing(id) {
		return nil, nil
	}
	all, err := h.allTopics(ctx)
	if err != nil {
		if ti, ok := h.topics.byIDStale(id); ok {
			return ti, nil
		}
		return nil, err
	}
	for _, ti := range all {
		if ti.ID == id {
			return ti, nil
		}
	}
	h.topics.markMissing(id)
	return nil, nil
}

// topicByIDCached is the fresh cache entry of the topic with id, if any.
func (h *Handler) topicByIDCached(id [16]byte) (*topicInfo, bool) {
	if n, ok := h.topics.nameForID(id); ok {
		if ti, ok := h.topics.get(n); ok && ti.ID == id {
			return ti, true
		}
	}
	return nil, false
}

// resolveTopics returns the registered topics among names, creating missing ones with
// the default partition count when create is set (TOPIC_ALREADY_EXISTS races are
// resolved by reading the topic again). codes holds a Kafka error code for every name
// that could not be resolved: UNKNOWN_TOPIC_OR_PARTITION when it does not exist,
// LEADER_NOT_AVAILABLE (retriable) when the coordinator could not be asked, or the
// coordinator's own code (e.g. INVALID_TOPIC_EXCEPTION) when creation was refused.
// coordErr is set when the coordinator was unreachable. mayCreate (nil: every name)
// says which missing names the caller is authorized to create; the others are
// TOPIC_AUTHORIZATION_FAILED. Kafka's internal topics (channel.KafkaInternalTopics)
// are INVALID_TOPIC_EXCEPTION here; Metadata lists them itself.
func (h *Handler) resolveTopics(ctx context.Context, names []string, create bool, mayCreate func(string) bool) (infos map[string]*topicInfo, codes map[string]int16, coordErr error) {
	infos, coordErr = h.getTopics(ctx, names, false)
	codes = map[string]int16{}
	var missing []string
	for _, n := range names {
		if _, ok := infos[n]; ok {
			continue
		}
		if _, seen := codes[n]; seen {
			continue
		}
		if _, internal := channel.KafkaInternal(n); internal {
			// Kafka's internal topics hold no log here and are never created: a
			// Produce to one is INVALID_TOPIC_EXCEPTION, as Kafka refuses appends to
			// internal topics.
			codes[n] = kerr.InvalidTopicException.Code
			continue
		}
		if coordErr != nil {
			codes[n] = kerr.LeaderNotAvailable.Code
			continue
		}
		codes[n] = kerr.UnknownTopicOrPartition.Code
		missing = append(missing, n)
	}
	if !create || !h.cfg.AutoCreateTopics || len(missing) == 0 {
		return infos, codes, coordErr
	}
	if mayCreate != nil {
		allowed := missing[:0]
		for _, n := range missing {
			if mayCreate(n) {
				allowed = append(allowed, n)
			} else {
				codes[n] = kerr.TopicAuthorizationFailed.Code
			}
		}
		if missing = allowed; len(missing) == 0 {
			return infos, codes, nil
		}
	}
	req := &coordinatorv1.CreateTopicsRequest{}
	for _, n := range missing {
		req.Topics = append(req.Topics, &coordinatorv1.CreatableTopic{Name: n, Partitions: h.cfg.DefaultPartitions})
	}
	gen := h.topics.generation()
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	resp, err := h.coord.CreateTopics(cctx, req)
	if err != nil {
		h.log.Warn("coordinator CreateTopics (auto-create) failed", zap.Strings("topics", missing), zap.Error(err))
		for _, n := range missing {
			codes[n] = kerr.LeaderNotAvailable.Code
		}
		return infos, codes, err
	}
	var reread []string
	for _, r := range resp.GetResults() {
		switch int16(r.GetErrorCode()) {
		case 0:
			if r.GetTopic() != nil {
				ti := topicFromProto(r.GetTopic())
				if ti.Name == "" {
					ti.Name = r.GetName()
				}
				infos[ti.Name] = ti
				delete(codes, ti.Name)
				h.topics.put(gen, ti)
				h.log.Info("topic auto-created", zap.String("topic", ti.Name), zap.Int32("partitions", ti.Partitions))
			} else {
				reread = append(reread, r.GetName())
			}
		case kerr.TopicAlreadyExists.Code:
			reread = append(reread, r.GetName())
		default:
			codes[r.GetName()] = int16(r.GetErrorCode())
		}
	}
	if len(reread) > 0 {
		again, err := h.getTopics(ctx, reread, true)
		for _, n := range reread {
			if ti, ok := again[n]; ok {
				infos[n] = ti
				delete(codes, n)
			} else if err != nil {
				codes[n] = kerr.LeaderNotAvailable.Code
			} else {
				// Created but not yet visible: retriable.
				codes[n] = kerr.LeaderNotAvailable.Code
			}
		}
	}
	return infos, codes, nil
}

// validTopicName reports whether a Kafka topic name is acceptable (libs/channel grammar).
// internalTopic returns Kafka internal topic name (or, with name empty, the one whose
// id is id) as Metadata shows it: is_internal, the cluster's stable id for it.
func (h *Handler) internalTopic(name string, id [16]byte) *topicInfo {
	for _, t := range channel.KafkaInternalTopics {
		tid := channel.KafkaInternalTopicID(h.cfg.ClusterID, t.Name)
		if t.Name == name || (name == "" && tid == id) {
			return &topicInfo{Name: t.Name, ID: tid, Partitions: t.Partitions, Internal: true}
		}
	}
	return nil
}

// internalFetch answers a Fetch of partition rp.Partition of Kafka internal topic it
// from offset as an empty log's: offsets 0, epochErr (leaderEpochCode) first, then
// UNKNOWN_TOPIC_OR_PARTITION past the topic's partitions, OFFSET_OUT_OF_RANGE from
// any offset but 0; 0 otherwise (the caller waits, nothing to send).
func internalFetch(rp *kmsg.FetchResponseTopicPartition, it channel.KafkaInternalTopic, offset int64, epochErr int16) int16 {
	switch {
	case rp.Partition >= it.Partitions:
		return kerr.UnknownTopicOrPartition.Code
	case epochErr != 0:
		return epochErr
	}
	rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = 0, 0, 0
	if offset != 0 {
		return kerr.OffsetOutOfRange.Code
	}
	return 0
}

// idleWait blocks for d (at most fetchMaxWait), or until ctx ends or the handler
// drains.
func (h *Handler) idleWait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(min(d, fetchMaxWait))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-h.drainCtx.Done():
	}
}

func validTopicName(name string) bool { return channel.ValidateKafkaTopic(name) == nil }

// topicNameError explains why a topic name is invalid.
func topicNameError(name string) error { return channel.ValidateKafkaTopic(name) }
