//go:build ort

// Package ort runs ONNX models in ONNX Runtime through its C API, loaded at
// run time with purego (no cgo), so that only binaries built with the `ort`
// tag depend on a shared library and the default binary stays static.
//
// The C API is a versioned table of function pointers (OrtApi) returned by
// OrtGetApiBase()->GetApi(version). The table only ever grows at the end, so
// the offsets used here (all from version 1 and 2 of the table) hold in
// every later release; apiVersion asks for the table of ONNX Runtime 1.23.
package ort

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Version is the ONNX Runtime release scripts/fetch-ort.sh installs and the
// tests are pinned to.
const Version = "1.23.2"

// apiVersion is ORT_API_VERSION of the 1.23 header.
const apiVersion = 23

// LibraryEnv names the environment variable that points at the shared library.
const LibraryEnv = "ONNXRUNTIME_LIB"

// CacheEnv overrides the cache directory scripts/fetch-ort.sh fills.
const CacheEnv = "COREAIQ_ORT_CACHE"

// ErrLibraryNotFound is returned (wrapped) when neither ONNXRUNTIME_LIB nor
// the fetch cache holds a library.
var ErrLibraryNotFound = errors.New("ONNX Runtime shared library not found")

// libraryFile is the file name fetch-ort.sh stores for this platform.
func libraryFile() string {
	if runtime.GOOS == "darwin" {
		return "libonnxruntime." + Version + ".dylib"
	}
	return "libonnxruntime.so.1"
}

// CachePath is where scripts/fetch-ort.sh puts the library:
// $COREAIQ_ORT_CACHE/<version>/<file>, by default under
// ${XDG_CACHE_HOME:-~/.cache}/coreaiq/ort.
func CachePath() string {
	base := os.Getenv(CacheEnv)
	if base == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				home = "~"
			}
			cache = filepath.Join(home, ".cache")
		}
		base = filepath.Join(cache, "coreaiq", "ort")
	}
	return filepath.Join(base, Version, libraryFile())
}

// LibraryPath resolves the shared library: ONNXRUNTIME_LIB when set (it must
// exist), else the fetch cache. The error names both places.
func LibraryPath() (string, error) {
	if p := os.Getenv(LibraryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", ErrLibraryNotFound, LibraryEnv, p, err)
		}
		return p, nil
	}
	p := CachePath()
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s is not set and %s does not exist; run scripts/fetch-ort.sh (or make ort) or set %s to the path of libonnxruntime",
			ErrLibraryNotFound, LibraryEnv, p, LibraryEnv)
	}
	return p, nil
}

// Error is a failed ONNX Runtime call, carrying ORT's own message.
type Error struct {
	// Op is the C API function that failed.
	Op   string
	Code ErrorCode
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("onnxruntime %s: %s: %s", e.Op, e.Code, e.Msg)
}

// ErrorCode is OrtErrorCode.
type ErrorCode int32

var errorCodeNames = [...]string{"ok", "fail", "invalid argument", "no such file", "no model",
	"engine error", "runtime exception", "invalid protobuf", "model loaded", "not implemented",
	"invalid graph", "execution provider failure", "model load canceled", "model requires compilation", "not found"}

func (c ErrorCode) String() string {
	if c >= 0 && int(c) < len(errorCodeNames) {
		return errorCodeNames[c]
	}
	return fmt.Sprintf("error code %d", int32(c))
}

// api holds the OrtApi functions this package calls. The comment on each
// field is its index in the OrtApi struct of onnxruntime_c_api.h.
type api struct {
	GetErrorCode                     func(status uintptr) int32                                                                                                                      // 1
	GetErrorMessage                  func(status uintptr) string                                                                                                                     // 2
	CreateEnv                        func(level int32, logid string, out *uintptr) uintptr                                                                                           // 3
	CreateSession                    func(env uintptr, path string, opts uintptr, out *uintptr) uintptr                                                                              // 7
	CreateSessionFromArray           func(env uintptr, data unsafe.Pointer, n uintptr, opts uintptr, out *uintptr) uintptr                                                           // 8
	Run                              func(sess, runOpts uintptr, inNames, inVals unsafe.Pointer, nIn uintptr, outNames unsafe.Pointer, nOut uintptr, outVals unsafe.Pointer) uintptr // 9
	CreateSessionOptions             func(out *uintptr) uintptr                                                                                                                      // 10
	SetOptimizedModelFilePath        func(opts uintptr, path string) uintptr                                                                                                         // 11
	SetSessionExecutionMode          func(opts uintptr, mode int32) uintptr                                                                                                          // 13
	SetSessionLogSeverityLevel       func(opts uintptr, level int32) uintptr                                                                                                         // 22
	SetSessionGraphOptimizationLevel func(opts uintptr, level int32) uintptr                                                                                                         // 23
	SetIntraOpNumThreads             func(opts uintptr, n int32) uintptr                                                                                                             // 24
	SetInterOpNumThreads             func(opts uintptr, n int32) uintptr                                                                                                             // 25
	SessionGetInputCount             func(sess uintptr, out *uintptr) uintptr                                                                                                        // 30
	SessionGetOutputCount            func(sess uintptr, out *uintptr) uintptr                                                                                                        // 31
	SessionGetInputTypeInfo          func(sess uintptr, i uintptr, out *uintptr) uintptr                                                                                             // 33
	SessionGetOutputTypeInfo         func(sess uintptr, i uintptr, out *uintptr) uintptr                                                                                             // 34
	SessionGetInputName              func(sess uintptr, i uintptr, alloc uintptr, out *unsafe.Pointer) uintptr                                                                       // 36
	SessionGetOutputName             func(sess uintptr, i uintptr, alloc uintptr, out *unsafe.Pointer) uintptr                                                                       // 37
	CreateRunOptions                 func(out *uintptr) uintptr                                                                                                                      // 39
	RunOptionsSetTerminate           func(ro uintptr) uintptr                                                                                                                        // 46
	CreateTensorWithDataAsOrtValue   func(mem uintptr, data unsafe.Pointer, nbytes uintptr, shape unsafe.Pointer, rank uintptr, typ int32, out *uintptr) uintptr                     // 49
	GetTensorMutableData             func(v uintptr, out *unsafe.Pointer) uintptr                                                                                                    // 51
	CastTypeInfoToTensorInfo         func(ti uintptr, out *uintptr) uintptr                                                                                                          // 55
	GetOnnxTypeFromTypeInfo          func(ti uintptr, out *int32) uintptr                                                                                                            // 56
	GetTensorElementType             func(info uintptr, out *int32) uintptr                                                                                                          // 60
	GetDimensionsCount               func(info uintptr, out *uintptr) uintptr                                                                                                        // 61
	GetDimensions                    func(info uintptr, dims unsafe.Pointer, n uintptr) uintptr                                                                                      // 62
	GetSymbolicDimensions            func(info uintptr, names unsafe.Pointer, n uintptr) uintptr                                                                                     // 63
	GetTensorShapeElementCount       func(info uintptr, out *uintptr) uintptr                                                                                                        // 64
	GetTensorTypeAndShape            func(v uintptr, out *uintptr) uintptr                                                                                                           // 65
	GetValueType                     func(v uintptr, out *int32) uintptr                                                                                                             // 67
	CreateCpuMemoryInfo              func(typ int32, memType int32, out *uintptr) uintptr                                                                                            // 69
	AllocatorFree                    func(alloc uintptr, p unsafe.Pointer) uintptr                                                                                                   // 76
	GetAllocatorWithDefaultOptions   func(out *uintptr) uintptr                                                                                                                      // 78
	ReleaseEnv                       func(p uintptr)                                                                                                                                 // 92
	ReleaseStatus                    func(p uintptr)                                                                                                                                 // 93
	ReleaseMemoryInfo                func(p uintptr)                                                                                                                                 // 94
	ReleaseSession                   func(p uintptr)                                                                                                                                 // 95
	ReleaseValue                     func(p uintptr)                                                                                                                                 // 96
	ReleaseRunOptions                func(p uintptr)                                                                                                                                 // 97
	ReleaseTypeInfo                  func(p uintptr)                                                                                                                                 // 98
	ReleaseTensorTypeAndShapeInfo    func(p uintptr)                                                                                                                                 // 99
	ReleaseSessionOptions            func(p uintptr)                                                                                                                                 // 100
	GetAvailableProviders            func(out *unsafe.Pointer, n *int32) uintptr                                                                                                     // 125
	ReleaseAvailableProviders        func(p unsafe.Pointer, n int32) uintptr                                                                                                         // 126
	AddSessionConfigEntry            func(opts uintptr, key, value string) uintptr                                                                                                   // 130
}

// apiSlots maps each field of api to its OrtApi index, so a wrong count is
// one line to fix and the table is checked against the struct in a test.
var apiSlots = map[string]int{
	"GetErrorCode": 1, "GetErrorMessage": 2, "CreateEnv": 3,
	"CreateSession": 7, "CreateSessionFromArray": 8, "Run": 9,
	"CreateSessionOptions": 10, "SetOptimizedModelFilePath": 11, "SetSessionExecutionMode": 13,
	"SetSessionLogSeverityLevel": 22, "SetSessionGraphOptimizationLevel": 23,
	"SetIntraOpNumThreads": 24, "SetInterOpNumThreads": 25,
	"SessionGetInputCount": 30, "SessionGetOutputCount": 31,
	"SessionGetInputTypeInfo": 33, "SessionGetOutputTypeInfo": 34,
	"SessionGetInputName": 36, "SessionGetOutputName": 37,
	"CreateRunOptions": 39, "RunOptionsSetTerminate": 46,
	"CreateTensorWithDataAsOrtValue": 49, "GetTensorMutableData": 51,
	"CastTypeInfoToTensorInfo": 55, "GetOnnxTypeFromTypeInfo": 56,
	"GetTensorElementType": 60, "GetDimensionsCount": 61, "GetDimensions": 62,
	"GetSymbolicDimensions": 63, "GetTensorShapeElementCount": 64,
	"GetTensorTypeAndShape": 65, "GetValueType": 67, "CreateCpuMemoryInfo": 69,
	"AllocatorFree": 76, "GetAllocatorWithDefaultOptions": 78,
	"ReleaseEnv": 92, "ReleaseStatus": 93, "ReleaseMemoryInfo": 94, "ReleaseSession": 95,
	"ReleaseValue": 96, "ReleaseRunOptions": 97, "ReleaseTypeInfo": 98, "ReleaseTensorTypeAndShapeInfo": 99,
	"ReleaseSessionOptions": 100, "GetAvailableProviders": 125, "ReleaseAvailableProviders": 126,
	"AddSessionConfigEntry": 130,
}

// logFatal is ORT_LOGGING_LEVEL_FATAL: only messages about to abort.
const logFatal = 4

// apiTableLen is how many OrtApi slots are read: one past the highest used.
const apiTableLen = 131

// Library is a loaded ONNX Runtime with its process-wide environment.
type Library struct {
	Path string
	// VersionString is what the library reports, e.g. "1.23.2".
	VersionString string

	handle uintptr
	api    api
	env    uintptr
	cpuMem uintptr
	alloc  uintptr
}

var (
	libMu sync.Mutex
	libs  = map[string]*Library{}
)

// Default loads the library LibraryPath resolves (once per process).
func Default() (*Library, error) {
	p, err := LibraryPath()
	if err != nil {
		return nil, err
	}
	return Load(p)
}

// Load opens the ONNX Runtime shared library at path, checks that it serves
// the 1.23 API and creates the process-wide environment. Loading the same
// path again returns the same Library: ONNX Runtime allows one environment
// per process, which lives until the process ends.
func Load(path string) (*Library, error) {
	libMu.Lock()
	defer libMu.Unlock()
	if l, ok := libs[path]; ok {
		return l, nil
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("load ONNX Runtime library %s: %w", path, err)
	}
	l, err := initLibrary(h, path)
	if err != nil {
		_ = purego.Dlclose(h)
		return nil, err
	}
	libs[path] = l
	return l, nil
}

type ortApiBase struct {
	GetApi           uintptr
	GetVersionString uintptr
}

func initLibrary(h uintptr, path string) (*Library, error) {
	sym, err := purego.Dlsym(h, "OrtGetApiBase")
	if err != nil {
		return nil, fmt.Errorf("%s is not an ONNX Runtime library: %w", path, err)
	}
	var getAPIBase func() *ortApiBase
	purego.RegisterFunc(&getAPIBase, sym)
	base := getAPIBase()
	if base == nil || base.GetApi == 0 || base.GetVersionString == 0 {
		return nil, fmt.Errorf("%s: OrtGetApiBase returned no API", path)
	}
	var getVersion func() string
	purego.RegisterFunc(&getVersion, base.GetVersionString)
	var getAPI func(version uint32) unsafe.Pointer
	purego.RegisterFunc(&getAPI, base.GetApi)
	l := &Library{Path: path, handle: h, VersionString: getVersion()}
	table := getAPI(apiVersion)
	if table == nil {
		return nil, fmt.Errorf("%s is ONNX Runtime %s, which does not serve C API version %d: ONNX Runtime >= 1.23 is needed (scripts/fetch-ort.sh installs %s)",
			path, l.VersionString, apiVersion, Version)
	}
	slots := unsafe.Slice((*uintptr)(table), apiTableLen)
	if err := bindAPI(&l.api, slots); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// ONNX Runtime logs to stderr on its own; every error it logs also comes
	// back in the failed call's status, which is how this package reports it.
	if err := l.check("CreateEnv", l.api.CreateEnv(logFatal, "coreaiq", &l.env)); err != nil {
		return nil, err
	}
	const arenaAllocator, memTypeDefault = 1, 0
	if err := l.check("CreateCpuMemoryInfo", l.api.CreateCpuMemoryInfo(arenaAllocator, memTypeDefault, &l.cpuMem)); err != nil {
		l.api.ReleaseEnv(l.env)
		return nil, err
	}
	if err := l.check("GetAllocatorWithDefaultOptions", l.api.GetAllocatorWithDefaultOptions(&l.alloc)); err != nil {
		l.api.ReleaseMemoryInfo(l.cpuMem)
		l.api.ReleaseEnv(l.env)
		return nil, err
	}
	return l, nil
}

// check turns an OrtStatus* into an error (nil for success) and releases it.
func (l *Library) check(op string, status uintptr) error {
	if status == 0 {
		return nil
	}
	e := &Error{Op: op, Code: ErrorCode(l.api.GetErrorCode(status)), Msg: l.api.GetErrorMessage(status)}
	l.api.ReleaseStatus(status)
	return e
}

// Providers lists the execution providers compiled into the library.
func (l *Library) Providers() ([]string, error) {
	var arr unsafe.Pointer
	var n int32
	if err := l.check("GetAvailableProviders", l.api.GetAvailableProviders(&arr, &n)); err != nil {
		return nil, err
	}
	ptrs := unsafe.Slice((*unsafe.Pointer)(arr), n)
	out := make([]string, n)
	for i, p := range ptrs {
		out[i] = goString(p)
	}
	if err := l.check("ReleaseAvailableProviders", l.api.ReleaseAvailableProviders(arr, n)); err != nil {
		return nil, err
	}
	return out, nil
}

// goString copies a NUL-terminated C string.
func goString(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}
