package feeds

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"
)

// The page slab: one allocation holding every page SQLite's caches keep,
// instead of one allocation per page.
//
// A cached page is its 4 KiB plus SQLite's header for it, about 4.3 KiB
// together, and modernc's allocator rounds every allocation of that size up
// to an 8 KiB slot: each page cache cost twice its size in RSS (the
// writer's 64 MiB cache took about 128 MiB, docs/benchmarks.md). A slab of
// exactly-sized slots (SQLITE_CONFIG_PAGECACHE) wastes nothing.
//
// Its costs: the slab is process-wide and must be configured before the
// first connection opens (SQLite refuses later); and SQLite links its
// slots into a free list when it starts, touching every one, so the slab
// is resident from the start rather than growing as the caches fill.
// When the slab runs short, the caches recycle their own least recently
// used pages before they overflow into single allocations, so its size
// also bounds what the caches can hold together.

var (
	slabOnce sync.Once
	slabErr  error
	// The slab's slots and bytes per slot, once configured; read by
	// metrics scrapes on other goroutines.
	slabSlots, slabSlot atomic.Int64
)

// ErrPageSlabTooLate is returned when SQLite was started before the slab
// could be configured: a connection opened first in this process.
var ErrPageSlabTooLate = errors.New("sqlite page slab: a connection was opened before it could be configured")

// slabPageSize is the page size the slab's slots are cut for: the default
// page size, which the schema never changes.
const slabPageSize = 4096

// ReservePageSlab gives SQLite's page caches one slab of mb MiB of pages
// for the whole process. Call it once, before the first Open; later calls
// change nothing and return the first call's result (PageSlab tells the
// size it got). It returns ErrPageSlabTooLate when a connection was opened
// first: the caches then allocate page by page, as without a slab.
func ReservePageSlab(mb int) error {
	slabOnce.Do(func() { slabErr = reservePageSlab(mb) })
	return slabErr
}

func reservePageSlab(mb int) error {
	if mb <= 0 {
		return fmt.Errorf("sqlite page slab: size %d MiB: want more than 0", mb)
	}
	tls := libc.NewTLS()
	defer tls.Close()
	// Four words: the va_list of a config call (VaList writes a word per
	// argument, three at most below) and an int out-parameter after it.
	scratch := libc.Xcalloc(tls, 4, 8)
	if scratch == 0 {
		return errors.New("sqlite page slab: out of memory")
	}
	defer libc.Xfree(tls, scratch)
	va, out := scratch, scratch+3*8

	// What SQLite adds to each page: its header, and the b-tree's and the
	// pager's state for the page.
	if rc := sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_PCACHE_HDRSZ, libc.VaList(va, out)); rc != sqlite3.SQLITE_OK {
		return configError(rc)
	}
	slot := int64(slabPageSize + *cInt32(out))
	slot = (slot + 7) &^ 7 // SQLite rounds slots down to 8 bytes
	slots := int64(mb) << 20 / slabPageSize
	size := types.Size_t(slots * slot)
	if int64(size) != slots*slot || slots > math.MaxInt32 {
		return fmt.Errorf("sqlite page slab: %d MiB does not fit this platform's address space", mb)
	}
	buf := libc.Xmalloc(tls, size)
	if buf == 0 {
		return fmt.Errorf("sqlite page slab: cannot allocate %d MiB", slots*slot>>20)
	}
	rc := sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_PAGECACHE, libc.VaList(va, buf, int32(slot), int32(slots)))
	if rc != sqlite3.SQLITE_OK {
		libc.Xfree(tls, buf)
		return configError(rc)
	}
	// The slab is never freed: SQLite owns it for the life of the process.
	slabSlot.Store(slot)
	slabSlots.Store(slots)
	return nil
}

func configError(rc int32) error {
	if rc == sqlite3.SQLITE_MISUSE {
		return ErrPageSlabTooLate
	}
	return fmt.Errorf("sqlite page slab: sqlite3_config returned %d", rc)
}

// PageSlabUse is what the page caches hold, for metrics.
type PageSlabUse struct {
	// SlotBytes and Slots size the slab; both are 0 without one.
	SlotBytes, Slots int64
	// UsedSlots are the slab's slots holding a page now.
	UsedSlots int64
	// OverflowBytes are held by pages allocated one by one because the
	// slab was full or absent.
	OverflowBytes int64
}

// PagesMB is how many MiB of pages the slab holds.
func (u PageSlabUse) PagesMB() int64 { return u.Slots * slabPageSize >> 20 }

// PageSlab reports the page caches' use of the slab.
func PageSlab() (PageSlabUse, error) {
	tls := libc.NewTLS()
	defer tls.Close()
	out := libc.Xcalloc(tls, 2, 8) // current, highwater
	if out == 0 {
		return PageSlabUse{}, errors.New("sqlite page slab: out of memory")
	}
	defer libc.Xfree(tls, out)
	read := func(op int32) (int64, error) {
		if rc := sqlite3.Xsqlite3_status64(tls, op, out, out+8, 0); rc != sqlite3.SQLITE_OK {
			return 0, fmt.Errorf("sqlite3_status(%d) returned %d", op, rc)
		}
		return *cInt64(out), nil
	}
	u := PageSlabUse{SlotBytes: slabSlot.Load(), Slots: slabSlots.Load()}
	var err error
	if u.UsedSlots, err = read(sqlite3.SQLITE_STATUS_PAGECACHE_USED); err != nil {
		return u, err
	}
	u.OverflowBytes, err = read(sqlite3.SQLITE_STATUS_PAGECACHE_OVERFLOW)
	return u, err
}

// cInt32 and cInt64 read C memory at p. The double conversion keeps vet's
// unsafeptr check quiet: p is an address in the C heap, which no Go
// pointer rules govern.
func cInt32(p uintptr) *int32 { return (*int32)(*(*unsafe.Pointer)(unsafe.Pointer(&p))) }
func cInt64(p uintptr) *int64 { return (*int64)(*(*unsafe.Pointer)(unsafe.Pointer(&p))) }
