package sim

// kvCache is a paged KV cache with prefix caching, after vLLM V1's
// KVCacheManager / BlockPool:
//
//   - Memory is NumBlocks blocks of BlockSize tokens; a request holds a list
//     of blocks covering its computed tokens.
//   - A block that is full gets the hash of its content (chained over the
//     blocks before it) and is entered in a hash → block map, so a later
//     request whose prompt starts with the same tokens reuses it (a prefix
//     cache hit) instead of computing it.
//   - Blocks nobody references sit in a free queue in LRU order and keep
//     their hash until they are handed out again, so a finished or preempted
//     request's blocks can still be hit. Freed requests return their blocks
//     tail first, so a sequence's last blocks are evicted before its prefix.
//
// Token contents are never materialized: a block's hash is a function of
// which system prompt it belongs to (shared) or of the request it belongs to
// (unique), and its index.
type kvCache struct {
	bs     int
	blocks []block
	// Free queue: a doubly linked list through blocks, head evicted first.
	head, tail int32
	nfree      int
	cached     map[uint64]int32
	scratch    []int32
}

type block struct {
	hash       uint64
	hashed     bool
	ref        int32
	prev, next int32
	free       bool
}

const nilBlock = -1

func newKVCache(numBlocks, blockSize int) *kvCache {
	c := &kvCache{
		bs:     blockSize,
		blocks: make([]block, numBlocks),
		head:   nilBlock,
		tail:   nilBlock,
		cached: make(map[uint64]int32, numBlocks),
	}
	for i := range c.blocks {
		c.blocks[i] = block{prev: nilBlock, next: nilBlock}
		c.pushFree(int32(i))
	}
	return c
}

// usage is the fraction of blocks in use (vLLM's kv_cache_usage: cached but
// unreferenced blocks count as free).
func (c *kvCache) usage() float64 {
	return 1 - float64(c.nfree)/float64(len(c.blocks))
}

func (c *kvCache) pushFree(b int32) {
	bl := &c.blocks[b]
	bl.free, bl.prev, bl.next = true, c.tail, nilBlock
	if c.tail != nilBlock {
		c.blocks[c.tail].next = b
	} else {
		c.head = b
	}
	c.tail = b
	c.nfree++
}

func (c *kvCache) unlinkFree(b int32) {
	bl := &c.blocks[b]
	if bl.prev != nilBlock {
		c.blocks[bl.prev].next = bl.next
	} else {
		c.head = bl.next
	}
	if bl.next != nilBlock {
		c.blocks[bl.next].prev = bl.prev
	} else {
		c.tail = bl.prev
	}
	bl.free, bl.prev, bl.next = false, nilBlock, nilBlock
	c.nfree--
}

// popFree hands out the least recently freed block, evicting its hash.
func (c *kvCache) popFree() int32 {
	b := c.head
	c.unlinkFree(b)
	bl := &c.blocks[b]
	if bl.hashed {
		if c.cached[bl.hash] == b {
			delete(c.cached, bl.hash)
		}
		bl.hashed = false
	}
	return b
}

// lookup returns the cached blocks that start r's tokens, at most
// (numTokens−1)/bs of them: the last token is always computed, so the
// request gets logits to sample from (as in vLLM). The slice is scratch
// space, valid until the next call.
func (c *kvCache) lookup(r *request) []int32 {
	hits := c.scratch[:0]
	limit := (r.numTokens() - 1) / c.bs
	for i := 0; i < limit; i++ {
		b, ok := c.cached[r.blockHash(i)]
		if !ok {
			break
		}
		hits = append(hits, b)
	}
	c.scratch = hits
	return hits
}

// allocate gives r the blocks it needs to hold its computed tokens plus
// newTokens more, taking hits (from lookup, for a request with no blocks
// yet) first. It changes nothing and returns false when the free blocks do
// not suffice.
func (c *kvCache) allocate(r *request, hits []int32, newTokens int) bool {
	have := len(r.blocks) + len(hits)
	need := (r.computed + len(hits)*c.bs + newTokens + c.bs - 1) / c.bs
	toAlloc := max(need-have, 0)
	evictable := 0
	for _, b := range hits {
		if c.blocks[b].ref == 0 {
			evictable++
		}
	}
	if toAlloc+evictable > c.nfree {
		return false
	}
	for _, b := range hits {
		bl := &c.blocks[b]
		if bl.ref == 0 {
			c.unlinkFree(b)
		}
		bl.ref++
		r.blocks = append(r.blocks, b)
	}
	for range toAlloc {
		b := c.popFree()
		c.blocks[b].ref = 1
		r.blocks = append(r.blocks, b)
	}
	return true
}

// commit enters r's newly full blocks into the prefix cache.
func (c *kvCache) commit(r *request) {
	full := min(r.computed/c.bs, len(r.blocks))
	for i := r.hashedBlocks; i < full; i++ {
		h := r.blockHash(i)
		if _, dup := c.cached[h]; dup {
			// Another request computed the same block first; vLLM keeps
			// the first and leaves this one uncached.
			continue
		}
		b := r.blocks[i]
		c.cached[h] = b
		c.blocks[b].hash, c.blocks[b].hashed = h, true
	}
	r.hashedBlocks = max(r.hashedBlocks, full)
}

// free releases r's blocks, tail first.
func (c *kvCache) free(r *request) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		b := r.blocks[i]
		bl := &c.blocks[b]
		bl.ref--
		if bl.ref == 0 {
			c.pushFree(b)
		}
	}
	r.blocks = r.blocks[:0]
	r.hashedBlocks = 0
}

// splitmix64 is a strong 64-bit mixer, enough for synthetic block hashes.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
