package etcd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// checkBolt is kubeboot's own check of a bbolt database, made on its bytes
// before anything else reads them: bbolt trusts its pages, and a file whose
// meta pages are right but whose other pages are crafted makes bbolt read
// outside the file, loop, exhaust memory or panic in a goroutine of its own
// (where no recover reaches), and etcdutl's restore opens the database
// with bbolt. checkBolt reads only inside data, visits each page at most
// once and recurses at most maxBoltDepth levels, so it ends in time and
// memory bounded by the file's size. It checks what bbolt's Tx.Check
// checks (every page in bounds, of its type, reached once and not freed,
// keys in order, no page left neither reached nor free) and the bounds
// bbolt assumes (elements, keys and values inside their page, nested
// buckets well formed), so that a database that passes is one bbolt reads
// safely. Each key and value of the root bucket's bucket named keyBucket
// goes to visit, in key order.
//
// The layout is bbolt's (go.etcd.io/bbolt/internal/common), in the byte
// order of the machine, as bbolt writes it.

// The layout of a bbolt file.
const (
	boltMagic   = 0xED0CDAED
	boltVersion = 2
	// boltPageHeader is a page's header: id (8 bytes), flags (2), element
	// count (2), overflow page count (4).
	boltPageHeader = 16
	// boltMetaSize is a meta page's fields after the header, checksum
	// last: magic, version, page size, flags (4 bytes each), the root
	// bucket (root page, sequence), freelist page, high water mark and
	// transaction id (8 bytes each), checksum (8).
	boltMetaSize, boltMetaChecksum = 64, 56
	// boltElement is a branch element (key position, key size, child
	// page) or a leaf element (flags, key position, key size, value size).
	boltElement = 16
	// boltBucketHeader starts a bucket's value: its root page (0 for an
	// inline bucket, whose leaf page follows) and its sequence.
	boltBucketHeader = 16
	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01
	// boltNoFreelist is a meta's freelist page when the freelist is not
	// written to the file, as etcd runs bbolt (NoFreelistSync).
	boltNoFreelist = ^uint64(0)
	// boltMinPageSize and boltMaxPageSize bound the page sizes bbolt
	// takes from the OS: 4 KiB, or 16 or 64 KiB on some arm64 kernels.
	boltMinPageSize, boltMaxPageSize = 512, 64 << 10
	// maxBoltDepth bounds the nesting of pages and buckets. A B+tree of
	// 4 KiB pages holds any file kubeboot accepts in fewer than 10
	// levels, and etcd nests no bucket.
	maxBoltDepth = 64
)

// native is bbolt's byte order: it maps the file into memory and reads it
// as Go structs.
var native = binary.NativeEndian

// boltMeta is the meta page bbolt uses.
type boltMeta struct {
	pageSize, root, freelist, pages, txid uint64
}

// boltFile is a database being checked.
type boltFile struct {
	ctx  context.Context
	data []byte
	meta boltMeta
	// reached and freed are bitsets of page ids.
	reached, freed []uint64
	// depth is how many pages deep the walk is, through nested buckets.
	depth int
}

func checkBolt(ctx context.Context, data []byte, visit leafFunc) error {
	meta, err := readBoltMetas(data)
	if err != nil {
		return fmt.Errorf("does not open as a bbolt database: %w", err)
	}
	b := &boltFile{ctx: ctx, data: data, meta: meta, reached: make([]uint64, meta.pages/64+1), freed: make([]uint64, meta.pages/64+1)}
	mark(b.reached, 0)
	mark(b.reached, 1)
	if err := b.readFreelist(); err != nil {
		return fmt.Errorf("its database is malformed: %w", err)
	}
	found := false
	_, err = b.walk(meta.root, nil, nil, func(name, value []byte, bucket bool) error {
		if !bucket {
			return fmt.Errorf("its root bucket holds %x, which is not a bucket", name)
		}
		if string(name) == keyBucket {
			found = true
			return b.walkBucket(value, visit)
		}
		return b.walkBucket(value, b.skip)
	})
	if err == nil {
		err = b.checkAllReached()
	}
	if err != nil {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		return fmt.Errorf("its database is malformed: %w", err)
	}
	if !found {
		return fmt.Errorf("its database has no %q bucket: it is not an etcd database", keyBucket)
	}
	return nil
}

// leafFunc receives each key and value of a bucket, in key order; bucket
// says the value is a nested bucket.
type leafFunc func(key, value []byte, bucket bool) error

// readBoltMetas checks both meta pages, as bbolt's snapshot writer writes
// them, and returns the one bbolt uses: the newer.
func readBoltMetas(data []byte) (boltMeta, error) {
	m0, err := readBoltMeta(data, 0)
	if err != nil {
		return boltMeta{}, fmt.Errorf("meta page 0: %w", err)
	}
	m1, err := readBoltMeta(data, m0.pageSize)
	if err != nil {
		return boltMeta{}, fmt.Errorf("meta page 1: %w", err)
	}
	if m1.pageSize != m0.pageSize {
		return boltMeta{}, fmt.Errorf("its meta pages disagree on the page size: %d and %d bytes", m0.pageSize, m1.pageSize)
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	if size := uint64(len(data)); m.pages > size/m.pageSize {
		return boltMeta{}, fmt.Errorf("its meta page records %d pages of %d bytes, but the database is %d bytes", m.pages, m.pageSize, size)
	}
	if m.root < 2 || m.root >= m.pages {
		return boltMeta{}, fmt.Errorf("its root bucket is page %d, outside pages 2 to %d", m.root, m.pages-1)
	}
	return m, nil
}

// readBoltMeta reads and checks the meta page at off.
func readBoltMeta(data []byte, off uint64) (boltMeta, error) {
	if uint64(len(data)) < off+boltPageHeader+boltMetaSize {
		return boltMeta{}, fmt.Errorf("the database is %d bytes, too short to hold it", len(data))
	}
	f := data[off+boltPageHeader:][:boltMetaSize]
	h := fnv.New64a()
	_, _ = h.Write(f[:boltMetaChecksum])
	switch {
	case native.Uint32(f) != boltMagic:
		return boltMeta{}, errors.New("no bbolt magic number")
	case native.Uint32(f[4:]) != boltVersion:
		return boltMeta{}, fmt.Errorf("bbolt file version %d, not %d", native.Uint32(f[4:]), boltVersion)
	case native.Uint64(f[boltMetaChecksum:]) != h.Sum64():
		return boltMeta{}, errors.New("its checksum does not match")
	}
	m := boltMeta{pageSize: uint64(native.Uint32(f[8:])), root: native.Uint64(f[16:]), freelist: native.Uint64(f[32:]), pages: native.Uint64(f[40:]), txid: native.Uint64(f[48:])}
	if m.pageSize < boltMinPageSize || m.pageSize > boltMaxPageSize || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d bytes: not a power of two from %d to %d", m.pageSize, boltMinPageSize, boltMaxPageSize)
	}
	return m, nil
}

// boltPage is a page with its overflow pages.
type boltPage struct {
	id    uint64
	buf   []byte
	flags uint16
	count uint64
}

// page reads page id of the tree and records it reached: it must be in
// bounds, reached once, not free, a branch or a leaf, and hold its
// elements.
func (b *boltFile) page(id uint64) (boltPage, error) {
	if err := b.ctx.Err(); err != nil {
		return boltPage{}, err
	}
	p, err := b.span(id)
	if err != nil {
		return boltPage{}, err
	}
	for i := range uint64(len(p.buf)) / b.meta.pageSize {
		switch {
		case isSet(b.reached, id+i):
			return boltPage{}, fmt.Errorf("page %d: reached twice", id+i)
		case isSet(b.freed, id+i):
			return boltPage{}, fmt.Errorf("page %d: reached, but free", id+i)
		}
		mark(b.reached, id+i)
	}
	if p.flags != boltBranchPage && p.flags != boltLeafPage {
		return boltPage{}, fmt.Errorf("page %d: flags %#x, not a branch or a leaf page", id, p.flags)
	}
	return p, checkCount(p)
}

// span reads page id and its overflow pages, all below the high water mark.
func (b *boltFile) span(id uint64) (boltPage, error) {
	if id < 2 || id >= b.meta.pages {
		return boltPage{}, fmt.Errorf("page %d: outside pages 2 to %d", id, b.meta.pages-1)
	}
	head := b.data[id*b.meta.pageSize:]
	if got := native.Uint64(head); got != id {
		return boltPage{}, fmt.Errorf("page %d: its header says page %d", id, got)
	}
	overflow := uint64(native.Uint32(head[12:]))
	if id+overflow >= b.meta.pages {
		return boltPage{}, fmt.Errorf("page %d: its %d overflow pages pass page %d", id, overflow, b.meta.pages-1)
	}
	return boltPage{id: id, buf: head[:(overflow+1)*b.meta.pageSize], flags: native.Uint16(head[8:]), count: uint64(native.Uint16(head[10:]))}, nil
}

// checkCount checks that p's elements fit in it, and that a branch page
// has some.
func checkCount(p boltPage) error {
	if boltPageHeader+p.count*boltElement > uint64(len(p.buf)) {
		return fmt.Errorf("page %d: %d elements do not fit in %d bytes", p.id, p.count, len(p.buf))
	}
	if p.flags == boltBranchPage && p.count == 0 {
		return fmt.Errorf("page %d: a branch page without elements", p.id)
	}
	return nil
}

// element returns element i of p: its key, and a leaf's value and flags
// or a branch's child page, all inside p.
func element(p boltPage, i uint64) (key, value []byte, flags uint32, child uint64, err error) {
	off := boltPageHeader + i*boltElement
	e := p.buf[off:]
	var pos, ksize, vsize uint64
	if p.flags == boltBranchPage {
		pos, ksize, child = uint64(native.Uint32(e)), uint64(native.Uint32(e[4:])), native.Uint64(e[8:])
	} else {
		flags, pos, ksize, vsize = native.Uint32(e), uint64(native.Uint32(e[4:])), uint64(native.Uint32(e[8:])), uint64(native.Uint32(e[12:]))
	}
	start := off + pos
	if end := start + ksize + vsize; end > uint64(len(p.buf)) {
		return nil, nil, 0, 0, fmt.Errorf("page %d: element %d ends at byte %d, past the page's %d", p.id, i, end, len(p.buf))
	}
	return p.buf[start : start+ksize], p.buf[start+ksize : start+ksize+vsize], flags, child, nil
}

// walk checks the subtree at page id, whose keys must be at least low and
// below high (nil for no bound), calls leaf for each leaf element, and
// returns the subtree's largest key.
func (b *boltFile) walk(id uint64, low, high []byte, leaf leafFunc) ([]byte, error) {
	if b.depth >= maxBoltDepth {
		return nil, fmt.Errorf("page %d: nested more than %d deep", id, maxBoltDepth)
	}
	b.depth++
	defer func() { b.depth-- }()
	p, err := b.page(id)
	if err != nil {
		return nil, err
	}
	if p.flags == boltLeafPage {
		return b.leaves(p, low, high, leaf)
	}
	last := low
	for i := range p.count {
		key, _, _, child, err := element(p, i)
		if err != nil {
			return nil, err
		}
		if err := checkOrder(p.id, i, key, last, high); err != nil {
			return nil, err
		}
		next := high
		if i+1 < p.count {
			if next, _, _, _, err = element(p, i+1); err != nil {
				return nil, err
			}
		}
		if last, err = b.walk(child, key, next, leaf); err != nil {
			return nil, err
		}
	}
	return last, nil
}

// leaves checks a leaf page's elements and calls leaf for each.
func (b *boltFile) leaves(p boltPage, low, high []byte, leaf leafFunc) ([]byte, error) {
	last := low
	for i := range p.count {
		key, value, flags, _, err := element(p, i)
		if err != nil {
			return nil, err
		}
		if flags&^boltBucketLeaf != 0 {
			return nil, fmt.Errorf("page %d: element %d has unknown flags %#x", p.id, i, flags)
		}
		if err := checkOrder(p.id, i, key, last, high); err != nil {
			return nil, err
		}
		if err := leaf(key, value, flags == boltBucketLeaf); err != nil {
			return nil, err
		}
		last = key
	}
	return last, nil
}

// checkOrder checks key, element i of page id, against the key before it
// (or the least its subtree may hold) and the bound above.
func checkOrder(id, i uint64, key, before, high []byte) error {
	if before != nil && (bytes.Compare(key, before) < 0 || i > 0 && bytes.Equal(key, before)) || high != nil && bytes.Compare(key, high) >= 0 {
		return fmt.Errorf("page %d: key %d, %x, is out of order", id, i, key)
	}
	return nil
}

// walkBucket checks the nested bucket whose value is value and calls
// leaf for its elements: its own pages, or an inline leaf page in value,
// which bbolt writes only for a bucket without nested buckets.
func (b *boltFile) walkBucket(value []byte, leaf leafFunc) error {
	if len(value) < boltBucketHeader {
		return fmt.Errorf("a bucket's value is %d bytes, too short for a bucket", len(value))
	}
	if root := native.Uint64(value); root != 0 {
		if len(value) != boltBucketHeader {
			return fmt.Errorf("the bucket at page %d has %d bytes after its header", root, len(value)-boltBucketHeader)
		}
		_, err := b.walk(root, nil, nil, leaf)
		return err
	}
	buf := value[boltBucketHeader:]
	if len(buf) < boltPageHeader {
		return errors.New("an inline bucket is too short for its page")
	}
	p := boltPage{buf: buf, flags: native.Uint16(buf[8:]), count: uint64(native.Uint16(buf[10:]))}
	if p.flags != boltLeafPage {
		return fmt.Errorf("an inline bucket's page has flags %#x, not a leaf page's", p.flags)
	}
	if err := checkCount(p); err != nil {
		return fmt.Errorf("an inline bucket's %w", err)
	}
	_, err := b.leaves(p, nil, nil, func(key, value []byte, bucket bool) error {
		if bucket {
			return fmt.Errorf("an inline bucket holds the bucket %x", key)
		}
		return leaf(key, value, false)
	})
	return err
}

// skip checks the buckets nested in a bucket other than the key bucket.
func (b *boltFile) skip(_, value []byte, bucket bool) error {
	if !bucket {
		return nil
	}
	return b.walkBucket(value, b.skip)
}

// readFreelist reads the freelist page, when the file has one, and
// records its pages reached and the pages it lists free, each once.
func (b *boltFile) readFreelist() error {
	if b.meta.freelist == boltNoFreelist {
		return nil
	}
	p, err := b.span(b.meta.freelist)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if p.flags != boltFreelistPage {
		return fmt.Errorf("freelist: page %d has flags %#x, not a freelist page's", p.id, p.flags)
	}
	for i := range uint64(len(p.buf)) / b.meta.pageSize {
		mark(b.reached, p.id+i)
	}
	// A count of 0xFFFF means the count is the first id's place.
	start, count := uint64(boltPageHeader), p.count
	if count == 0xFFFF {
		start, count = boltPageHeader+8, native.Uint64(p.buf[boltPageHeader:])
	}
	if count > (uint64(len(p.buf))-start)/8 {
		return fmt.Errorf("freelist: %d page ids do not fit in page %d", count, p.id)
	}
	for i := range count {
		id := native.Uint64(p.buf[start+8*i:])
		switch {
		case id < 2 || id >= b.meta.pages:
			return fmt.Errorf("freelist: page %d is outside pages 2 to %d", id, b.meta.pages-1)
		case isSet(b.freed, id):
			return fmt.Errorf("freelist: page %d is free twice", id)
		}
		mark(b.freed, id)
	}
	return nil
}

// checkAllReached checks, when the file has a freelist, that every page is
// reached or free, as bbolt's check does; without one, bbolt takes the
// pages not reached as free.
func (b *boltFile) checkAllReached() error {
	if b.meta.freelist == boltNoFreelist {
		return nil
	}
	for id := range b.meta.pages {
		if !isSet(b.reached, id) && !isSet(b.freed, id) {
			return fmt.Errorf("page %d: neither reached nor free", id)
		}
	}
	return nil
}

func mark(set []uint64, id uint64)       { set[id/64] |= 1 << (id % 64) }
func isSet(set []uint64, id uint64) bool { return set[id/64]&(1<<(id%64)) != 0 }
