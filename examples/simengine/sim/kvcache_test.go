package sim

import "testing"

func newReq(uid uint64, prompt, prefix, shared int) *request {
	return &request{prompt: prompt, prefix: prefix, shared: shared, uid: uid, bs: 16, inPrefill: true}
}

func TestKVCachePrefixHitsAndEviction(t *testing.T) {
	c := newKVCache(10, 16)
	a := newReq(1, 70, 0, 64) // 4 full shared blocks + 6 tokens of its own
	if hits := c.lookup(a); len(hits) != 0 {
		t.Fatalf("hits on an empty cache: %v", hits)
	}
	if !c.allocate(a, nil, 70) {
		t.Fatal("allocation of 5 blocks failed on a 10-block cache")
	}
	a.computed = 70
	c.commit(a)
	if c.nfree != 5 || c.usage() != 0.5 {
		t.Fatalf("free %d usage %v, want 5 and 0.5", c.nfree, c.usage())
	}

	// Same system prompt: the 4 shared blocks hit while a holds them.
	b := newReq(2, 100, 0, 64)
	hits := c.lookup(b)
	if len(hits) != 4 {
		t.Fatalf("%d hits, want 4", len(hits))
	}
	if !c.allocate(b, hits, 100-64) {
		t.Fatal("allocation with hits failed")
	}
	if c.nfree != 2 || c.blocks[a.blocks[0]].ref != 2 {
		t.Fatalf("free %d, shared ref %d; want 2 free and ref 2", c.nfree, c.blocks[a.blocks[0]].ref)
	}

	// A prompt that is all shared prefix still computes its last token.
	d := newReq(3, 64, 0, 64)
	if hits := c.lookup(d); len(hits) != 3 {
		t.Fatalf("full-prefix prompt: %d hits, want 3 (the last token is never a hit)", len(hits))
	}

	// Not enough free blocks: nothing changes.
	e := newReq(4, 100, -1, 0)
	if c.allocate(e, nil, 100) || len(e.blocks) != 0 || c.nfree != 2 {
		t.Fatal("an allocation that does not fit changed the cache")
	}

	// Freed blocks stay hittable until reused; a's own tail goes first.
	c.free(b)
	c.free(a)
	if c.nfree != 10 {
		t.Fatalf("free %d after freeing everything", c.nfree)
	}
	if hits := c.lookup(newReq(5, 80, 0, 64)); len(hits) != 4 {
		t.Fatalf("%d hits on freed but cached blocks, want 4", len(hits))
	}
	// Free queue now: the 2 never-used blocks, b's 3 own blocks (tail
	// first), a's own block, then a's shared blocks 3, 2, 1, 0. Taking 7
	// evicts shared block 3 and keeps the first three.
	f := newReq(6, 16*7, -1, 0)
	if !c.allocate(f, nil, 16*7) {
		t.Fatal("allocation failed")
	}
	if hits := c.lookup(newReq(7, 80, 0, 64)); len(hits) != 3 {
		t.Fatalf("%d hits after eviction, want 3 (a prefix is evicted from its end)", len(hits))
	}
}

func TestKVCacheAllocateGrowsByBlocks(t *testing.T) {
	c := newKVCache(4, 16)
	r := newReq(1, 16, -1, 0)
	if !c.allocate(r, nil, 16) || len(r.blocks) != 1 {
		t.Fatalf("blocks %d", len(r.blocks))
	}
	r.computed = 16
	for i := 0; i < 16; i++ { // decoding within the second block takes one block
		if !c.allocate(r, nil, 1) {
			t.Fatal("decode allocation failed")
		}
		r.computed++
	}
	if len(r.blocks) != 2 {
		t.Fatalf("blocks %d after 16 decode tokens, want 2", len(r.blocks))
	}
}
