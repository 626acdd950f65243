package runtime

import (
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// arena recycles the float32 buffers of one run's intermediate values.
// Kernels take output buffers from it (runCtx.newFloat); the program counts,
// per buffer, the slots that hold a tensor inside it (views such as Reshape
// outputs share their input's buffer) and hands a buffer back for reuse
// when the last such slot is freed. Buffers of graph outputs and of values
// that outlive the program are never freed, so they are never reused: Run's
// results stay valid. Taps see buffers only during the call (Tap's contract).
type arena struct {
	// free holds reusable buffers by length: a model's runs ask for the
	// same lengths in the same order, so exact lengths hit.
	free map[int][][]float32
	// live are the buffers handed out during this run.
	live []liveBuf
	// poison makes allocBuf fill the recycled buffers it does not zero
	// with NaN, so that tests catch a kernel that leaves an output element
	// unwritten (Options.poisonArena).
	poison bool
	// pool lends the buffers of closed sessions (Options.Buffers; nil:
	// none).
	pool *BufferPool
}

// BufferPool hands the free run buffers of a closed session to the
// sessions opened after it (Options.Buffers). A caller that opens one
// session after another on models of about the same size (the candidates
// of a sensitivity analysis or an accuracy search, each run on the same
// samples) then reuses memory instead of asking the system for every
// run's buffers again: each new buffer is zeroed memory the kernel must
// map, several times a model's activations per candidate. The results of
// a run are never in it; a value a tap saw must not be read once its
// session is closed (Tap's contract already ends at the call).
type BufferPool struct {
	mu   sync.Mutex
	free map[int][][]float32
}

// NewBufferPool returns an empty pool.
func NewBufferPool() *BufferPool { return &BufferPool{free: map[int][][]float32{}} }

// take returns a buffer of n floats from the pool, nil when it has none.
func (p *BufferPool) take(n int) []float32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.free[n]
	if len(l) == 0 {
		return nil
	}
	buf := l[len(l)-1]
	l[len(l)-1] = nil
	p.free[n] = l[:len(l)-1]
	return buf
}

// give adds an arena's free buffers to the pool.
func (p *BufferPool) give(free map[int][][]float32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, l := range free {
		p.free[n] = append(p.free[n], l...)
	}
}

type liveBuf struct {
	lo, hi uintptr // address range of the buffer
	buf    []float32
	refs   int
}

// arenas is the per-session store of arenas between runs; concurrent runs
// each take their own.
type arenas struct {
	mu     sync.Mutex
	idle   []*arena
	poison bool
	pool   *BufferPool
}

func (as *arenas) get() *arena {
	as.mu.Lock()
	defer as.mu.Unlock()
	if n := len(as.idle); n > 0 {
		a := as.idle[n-1]
		as.idle = as.idle[:n-1]
		return a
	}
	return &arena{free: map[int][][]float32{}, poison: as.poison, pool: as.pool}
}

// close hands the idle arenas' free buffers to the pool, if any.
func (as *arenas) close() {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.pool != nil {
		for _, a := range as.idle {
			as.pool.give(a.free)
		}
	}
	as.idle = nil
}

// put returns a after a run; buffers still live belong to the results (or
// were never released) and are dropped from the arena.
func (as *arenas) put(a *arena) {
	clear(a.live)
	a.live = a.live[:0]
	as.mu.Lock()
	as.idle = append(as.idle, a)
	as.mu.Unlock()
}

// allocBuf returns a buffer of n floats, recycled when one is free and
// zeroed when zero is set; a recycled buffer otherwise holds whatever its
// last value left in it.
func (a *arena) allocBuf(n int, zero bool) []float32 {
	var buf []float32
	if l := a.free[n]; len(l) > 0 {
		buf = l[len(l)-1]
		a.free[n] = l[:len(l)-1]
	} else if a.pool != nil {
		buf = a.pool.take(n)
	}
	if buf != nil {
		switch {
		case zero:
			clear(buf)
		case a.poison:
			for i := range buf {
				buf[i] = float32(math.NaN())
			}
		}
	} else {
		buf = make([]float32, n)
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a.live = append(a.live, liveBuf{lo: lo, hi: lo + uintptr(n)*4, buf: buf})
	return buf
}

// find returns the index of the live buffer holding t's data, or -1.
func (a *arena) find(t *tensor.Tensor) int {
	d, ok := t.Data.([]float32)
	if !ok || cap(d) == 0 {
		return -1
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	for i := len(a.live) - 1; i >= 0; i-- {
		if b := &a.live[i]; p >= b.lo && p < b.hi {
			return i
		}
	}
	return -1
}

// hold counts one more slot holding t.
func (a *arena) hold(t *tensor.Tensor) {
	if i := a.find(t); i >= 0 {
		a.live[i].refs++
	}
}

// release counts one slot less holding t and recycles its buffer when no
// slot holds it any more.
func (a *arena) release(t *tensor.Tensor) {
	i := a.find(t)
	if i < 0 {
		return
	}
	b := &a.live[i]
	if b.refs--; b.refs > 0 {
		return
	}
	a.free[len(b.buf)] = append(a.free[len(b.buf)], b.buf)
	a.live[i] = a.live[len(a.live)-1]
	a.live[len(a.live)-1] = liveBuf{}
	a.live = a.live[:len(a.live)-1]
}

// newFloat returns a zeroed float32 tensor of the given shape, from the
// run's arena when there is one (rc is nil or has none while folding
// constants at compile time).
func (rc *runCtx) newFloat(shape ...int) *tensor.Tensor { return rc.newFloatBuf(shape, true) }

// newFloatOut is newFloat for kernels that write every element of their
// output: a recycled buffer is not cleared first (clearing cost a tenth
// of a MobileNetV2 run). TestArenaPoison holds every caller to that.
func (rc *runCtx) newFloatOut(shape ...int) *tensor.Tensor { return rc.newFloatBuf(shape, false) }

func (rc *runCtx) newFloatBuf(shape []int, zero bool) *tensor.Tensor {
	if rc == nil || rc.arena == nil {
		return tensor.New(tensor.Float, shape...)
	}
	n := tensor.NumElements(shape)
	return &tensor.Tensor{DType: tensor.Float, Shape: slices.Clone(shape), Data: rc.arena.allocBuf(n, zero)}
}
