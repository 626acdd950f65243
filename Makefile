# coreaiq — build, test and check.
GO          ?= go
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s
BIN         ?= bin/coreaiq

.PHONY: all build install test test-short test-noasm test-ort test-arm64 ort check-static deps lint fmt vet staticcheck fuzz generate check-generate bench bench-engines release release-check check clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/coreaiq

install:
	CGO_ENABLED=0 $(GO) install -trimpath ./cmd/coreaiq

# deps installs the Debian packages the tests need (protoc, libonnx-testdata), once.
deps:
	@scripts/install-deps.sh

# test is what CI runs: formatting, vet, the generated code check, the static
# binary check, and every test, in the default build and again with the ONNX
# Runtime engine compiled in (test-ort).
test: deps fmt vet staticcheck check-generate check-static
	$(GO) test -count=1 -timeout 30m ./...
	@$(MAKE) --no-print-directory test-ort
	@$(MAKE) --no-print-directory test-arm64

# ort fetches the ONNX Runtime shared library the `ort` engine loads and
# prints its path (cached; no network once fetched).
ort:
	@scripts/fetch-ort.sh

# test-ort proves the ort build compiles without cgo, then runs every test
# with -tags ort against the fetched library.
test-ort: ort
	CGO_ENABLED=0 $(GO) build -tags ort -o /dev/null ./cmd/coreaiq
	$(GO) vet -tags ort ./...
	$(STATICCHECK) -tags ort ./...
	ONNXRUNTIME_LIB="$$(scripts/fetch-ort.sh)" CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m -tags ort ./...

# check-static fails when the default binary is dynamically linked.
check-static: build
	@scripts/check-static.sh $(BIN)

test-short:
	$(GO) test -short ./...

test-noasm:
	$(GO) test -count=1 -tags noasm ./...

# test-arm64 cross-compiles the kernel, tensor and engine tests (the ONNX
# conformance suite among them) for linux/arm64 and runs them under
# qemu-aarch64 (Debian's qemu-user, installed by make deps). The engine's
# shared-model parity and determinism suites run natively only: emulated,
# they alone take over ten minutes.
ARM64_PKGS ?= ./pkg/kernels ./pkg/tensor ./pkg/runtime
test-arm64: deps
	@ARM64_SKIP='TestSharedModels|TestDeterminism|TestArenaPoison' scripts/test-arm64.sh $(ARM64_PKGS)

# release builds static, reproducible binaries for every platform with a
# SHA256SUMS file into dist/; release-check builds twice and compares.
release:
	@scripts/release.sh dist

release-check:
	@scripts/release.sh --check

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') | grep -v '\.pb\.go$$' || true); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(STATICCHECK) ./...

lint: fmt vet staticcheck

generate:
	scripts/generate.sh
	cd internal/asm/stats && $(GO) run . -out ../../../pkg/kernels/stats_amd64.s -stubs ../../../pkg/kernels/stats_stubs_amd64.go -pkg kernels
	cd internal/asm/gemm && $(GO) run . -out ../../../pkg/kernels/gemm_amd64.s -stubs ../../../pkg/kernels/gemm_stubs_amd64.go -pkg kernels
	cd internal/asm/quanterr && $(GO) run . -out ../../../pkg/kernels/quanterr_amd64.s -stubs ../../../pkg/kernels/quanterr_stubs_amd64.go -pkg kernels
	cd internal/asm/quantize && $(GO) run . -out ../../../pkg/kernels/quantize_amd64.s -stubs ../../../pkg/kernels/quantize_stubs_amd64.go -pkg kernels
	cd internal/asm/adaround && $(GO) run . -out ../../../pkg/kernels/adaround_amd64.s -stubs ../../../pkg/kernels/adaround_stubs_amd64.go -pkg kernels
	cd internal/asm/neon && $(GO) run . -dir ../../../pkg/kernels
	$(GO) run ./cmd/coreaiq config schema > configs/coreaiq.schema.json

# check-generate fails when the committed generated code is not what the generator writes.
check-generate: deps
	@tmp=$$(mktemp -d) && cp pkg/onnxgraph/onnxpb/onnx-ml.pb.go $$tmp/ && scripts/generate.sh && \
	if ! cmp -s $$tmp/onnx-ml.pb.go pkg/onnxgraph/onnxpb/onnx-ml.pb.go; then \
		cp $$tmp/onnx-ml.pb.go pkg/onnxgraph/onnxpb/; rm -rf $$tmp; \
		echo "generated code is stale: run make generate and commit"; exit 1; fi; rm -rf $$tmp
	@tmp=$$(mktemp -d) && (cd internal/asm/stats && $(GO) run . -out $$tmp/stats_amd64.s -stubs $$tmp/stats_stubs_amd64.go -pkg kernels) && \
	for f in stats_amd64.s stats_stubs_amd64.go; do \
		if ! diff -q -I '^// Code generated' $$tmp/$$f pkg/kernels/$$f >/dev/null; then \
			rm -rf $$tmp; echo "pkg/kernels/$$f is stale: run make generate and commit"; exit 1; fi; \
	done; rm -rf $$tmp
	@tmp=$$(mktemp -d) && (cd internal/asm/gemm && $(GO) run . -out $$tmp/gemm_amd64.s -stubs $$tmp/gemm_stubs_amd64.go -pkg kernels) && \
	for f in gemm_amd64.s gemm_stubs_amd64.go; do \
		if ! diff -q -I '^// Code generated' $$tmp/$$f pkg/kernels/$$f >/dev/null; then \
			rm -rf $$tmp; echo "pkg/kernels/$$f is stale: run make generate and commit"; exit 1; fi; \
	done; rm -rf $$tmp
	@tmp=$$(mktemp -d) && (cd internal/asm/quanterr && $(GO) run . -out $$tmp/quanterr_amd64.s -stubs $$tmp/quanterr_stubs_amd64.go -pkg kernels) && \
	for f in quanterr_amd64.s quanterr_stubs_amd64.go; do \
		if ! diff -q -I '^// Code generated' $$tmp/$$f pkg/kernels/$$f >/dev/null; then \
			rm -rf $$tmp; echo "pkg/kernels/$$f is stale: run make generate and commit"; exit 1; fi; \
	done; rm -rf $$tmp
	@tmp=$$(mktemp -d) && (cd internal/asm/quantize && $(GO) run . -out $$tmp/quantize_amd64.s -stubs $$tmp/quantize_stubs_amd64.go -pkg kernels) && \
	for f in quantize_amd64.s quantize_stubs_amd64.go; do \
		if ! diff -q -I '^// Code generated' $$tmp/$$f pkg/kernels/$$f >/dev/null; then \
			rm -rf $$tmp; echo "pkg/kernels/$$f is stale: run make generate and commit"; exit 1; fi; \
	done; rm -rf $$tmp
	@tmp=$$(mktemp -d) && (cd internal/asm/adaround && $(GO) run . -out $$tmp/adaround_amd64.s -stubs $$tmp/adaround_stubs_amd64.go -pkg kernels) && \
	for f in adaround_amd64.s adaround_stubs_amd64.go; do \
		if ! diff -q -I '^// Code generated' $$tmp/$$f pkg/kernels/$$f >/dev/null; then \
			rm -rf $$tmp; echo "pkg/kernels/$$f is stale: run make generate and commit"; exit 1; fi; \
	done; rm -rf $$tmp
	@tmp=$$(mktemp -d) && (cd internal/asm/neon && $(GO) run . -dir $$tmp) && \
	for f in gemm_arm64.s stats_arm64.s quanterr_arm64.s depthwise_arm64.s epilogue_arm64.s binary_arm64.s; do \
		if ! diff -q $$tmp/$$f pkg/kernels/$$f >/dev/null; then \
			rm -rf $$tmp; echo "pkg/kernels/$$f is stale: run make generate and commit"; exit 1; fi; \
	done; rm -rf $$tmp
	@tmp=$$(mktemp) && $(GO) run ./cmd/coreaiq config schema > $$tmp && \
	if ! cmp -s $$tmp configs/coreaiq.schema.json; then \
		rm -f $$tmp; echo "configs/coreaiq.schema.json is stale: run make generate and commit"; exit 1; fi; rm -f $$tmp

# fuzz runs every fuzz target for FUZZTIME each (go test -fuzz takes one target at a time).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-engines runs every model in SHARED_MODELS on the built-in engine and
# ONNX Runtime (batch 1 and 8, threads 1 and 2, runs interleaved) and prints
# median latencies and the go/ort ratio; bench/engines/README.md says how to
# point it at any folder of models (SHARED_MODELS=DIR) and which flags
# BENCH_ENGINES_FLAGS takes.
SHARED_MODELS ?= $(if $(COREAIQ_SHARED_MODELS),$(COREAIQ_SHARED_MODELS),../shared/models)
bench-engines: ort
	ONNXRUNTIME_LIB="$$(scripts/fetch-ort.sh)" CGO_ENABLED=0 $(GO) run -tags ort ./bench/engines -models $(SHARED_MODELS) $(BENCH_ENGINES_FLAGS)

check: lint test test-noasm release-check

clean:
	rm -rf bin
