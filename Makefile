# sparkinfer - build, test, benchmark.
#   make            library (build/lib), tools (build/bin)
#   make test       Criterion suites that need no GPU (SAN=1: with ASan+UBSan, in build/san)
#   make gpu-test   suites that need a CUDA GPU
#   make bench      benchmarks (GPU)
#   make bench-host host-side benchmarks on this machine, no GPU (the stub driver for the launch path)
#   make demo       the main job: prebuild kernels with sk-warm, list the cache
#   make install PREFIX=/usr/local DESTDIR=
#   make deps       check (and as root, install) the Debian packages the build needs

CUDA_HOME ?= /usr/local/cuda
PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
BUILD ?= build
SANFLAGS :=
endif

VERSION := 0.1.0
GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
SOMAJOR := 0
DEB_PACKAGES := liblmdb-dev libxxhash-dev libcjson-dev libcriterion-dev libdlpack-dev lmdb-utils

WARN := -Wall -Wextra -Werror -Wno-missing-field-initializers
CFLAGS ?= -O2 -g
# Layers: base/ (errors, env, utilities) <- cache/ (the LMDB store) <- runtime/ <- ops/. The
# objects of base/ and cache/ see only the include directories of the layers below them, so the
# layering is checked by every build.
INC = -Iinclude -Ibase -Icache -Iruntime -Iops -I$(BUILD)/gen -I$(CUDA_HOME)/include
ALL_CFLAGS = -std=c11 $(WARN) $(CFLAGS) $(SANFLAGS) -fPIC -D_GNU_SOURCE -pthread $(INC) \
  -DSK_DEFAULT_CUDA_HOME='"$(CUDA_HOME)"'
LIB_CFLAGS = $(ALL_CFLAGS) -fvisibility=hidden -DSK_BUILDING_LIBRARY
$(BUILD)/obj/base/%.o: INC = -Iinclude -Ibase
$(BUILD)/obj/cache/%.o: INC = -Iinclude -Ibase -Icache
CUDA_LIBDIR := $(CUDA_HOME)/lib64
LDLIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lnvrtc -lnvJitLink -llmdb -lxxhash -lcjson \
  -ldl -lpthread -lm
LDFLAGS ?=
ALL_LDFLAGS := $(LDFLAGS) $(SANFLAGS) -pthread

# ops/<family>/: host code (*.c), kernels (*.cuh, embedded by path relative to ops/), CPU
# references (ref*.c, tests only), case tables (cases*.c, tests only) and contract docs.
OP_TEST_SRC = $(filter ref% cases%,$(notdir $(1)))
OP_HOST_SRCS := $(foreach f,$(wildcard ops/*/*.c),$(if $(call OP_TEST_SRC,$(f)),,$(f)))
LIB_SRCS := $(sort $(wildcard base/*.c cache/*.c runtime/*.c) $(OP_HOST_SRCS))
LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(BUILD)/obj/gen/embedded_sources.o
KERNEL_SRCS := $(sort $(shell find ops -type f \( -name '*.cuh' -o -name '*.cu' \) 2>/dev/null))
REF_SRCS := $(sort $(wildcard ops/*/ref*.c))
REF_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(REF_SRCS))
# The op harness (tests/harness/harness.h): its engine and every op's case table.
CASE_SRCS := $(sort $(wildcard ops/*/cases*.c))
HARNESS_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,tests/harness/harness.c $(CASE_SRCS))
HARNESS_LIB := $(BUILD)/lib/libskharness.a
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
GPU_TEST_SRCS := $(sort $(wildcard tests/gpu/test_*.c))
GPU_TEST_BINS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_TEST_SRCS))
HELPER_SRCS := $(sort $(wildcard tests/helpers/*.c))
HELPER_BINS := $(patsubst tests/helpers/%.c,$(BUILD)/tests/helpers/%,$(HELPER_SRCS))
BENCH_SRCS := $(sort $(wildcard bench/*.c))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
TOOL_BINS := $(BUILD)/bin/sk-warm $(BUILD)/bin/sk-cache
STUB_DRIVER := $(BUILD)/stub/libcuda.so.1
SHLIB := $(BUILD)/lib/libsparkinfer.so.$(VERSION)
STLIB := $(BUILD)/lib/libsparkinfer.a
DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all lib tools test gpu-test bench bench-host demo install deps clean check-cuda gpu-bins compile-check kernel-lists
all: lib tools

# ---- dependencies ------------------------------------------------------------------------
deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/check-deps.sh
	@CUDA_HOME="$(CUDA_HOME)" sh tools/check-deps.sh $(DEB_PACKAGES)
	@mkdir -p $(@D) && touch $@

check-cuda: $(DEPS_STAMP)

# ---- library -----------------------------------------------------------------------------
lib: $(SHLIB) $(STLIB)

$(BUILD)/bin/sk-embed: tools/embed.c tools/source_norm.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(WARN) -O2 -D_GNU_SOURCE -o $@ $< -lxxhash

$(BUILD)/gen/embedded_sources.c: $(BUILD)/bin/sk-embed $(KERNEL_SRCS)
	@mkdir -p $(@D)
	$(BUILD)/bin/sk-embed ops $@ $(KERNEL_SRCS:ops/%=%)

# The op registry's list, generated from the ops' `const sk_op_def sk_op_<group>_<op> = {` lines
# (rewritten only when it changes, so the registry is not rebuilt for nothing).
OP_LIST := $(BUILD)/gen/op_list.h
$(OP_LIST): $(OP_HOST_SRCS) Makefile
	@mkdir -p $(@D)
	@{ printf '#define SK_OP_LIST(X)'; sed -n 's/^const sk_op_def \(sk_op_[a-z0-9_]*\) =.*/ X(\1)/p' $(OP_HOST_SRCS) | \
	  sort | tr -d '\n'; echo; } > $@.tmp; cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/obj/runtime/registry.o: $(OP_LIST)

# The harness's list of case tables (`const skh_op skh_op_<group>_<op> = {` lines), likewise.
CASE_LIST := $(BUILD)/gen/case_list.h
$(CASE_LIST): $(CASE_SRCS) Makefile
	@mkdir -p $(@D)
	@{ printf '#define SKH_CASE_LIST(X)'; sed -n 's/^const skh_op \(skh_op_[a-z0-9_]*\) =.*/ X(\1)/p' $(CASE_SRCS) | \
	  sort | tr -d '\n'; echo; } > $@.tmp; cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/obj/tests/harness/harness.o: $(CASE_LIST)

$(BUILD)/obj/gen/embedded_sources.o: $(BUILD)/gen/embedded_sources.c
	@mkdir -p $(@D)
	$(CC) $(LIB_CFLAGS) -Iruntime -c -o $@ $<

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(LIB_CFLAGS) -MMD -MP -c -o $@ $<

# The CPU references and the harness: test code, built like the tests (not into the library).
$(REF_OBJS) $(HARNESS_OBJS): $(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests -MMD -MP -c -o $@ $<

$(BUILD)/obj/tests/%.o: tests/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests -MMD -MP -c -o $@ $<

$(SHLIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libsparkinfer.so.$(SOMAJOR) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)
	ln -sf libsparkinfer.so.$(VERSION) $(BUILD)/lib/libsparkinfer.so.$(SOMAJOR)
	ln -sf libsparkinfer.so.$(SOMAJOR) $(BUILD)/lib/libsparkinfer.so

$(STLIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Header dependencies of the binaries compiled and linked in one step (tools, tests, benches),
# kept out of their output folders (tools/gpu-run.sh runs everything in build/bench).
BIN_DEPFLAGS = -MMD -MP -MF $(BUILD)/deps/$(subst /,_,$@).d

# ---- tools -------------------------------------------------------------------------------
tools: $(TOOL_BINS)
$(BUILD)/bin/sk-%: tools/sk-%.c $(STLIB)
	@mkdir -p $(@D) $(BUILD)/deps
	$(CC) $(ALL_CFLAGS) $(BIN_DEPFLAGS) $(ALL_LDFLAGS) -o $@ $< $(STLIB) $(LDLIBS)

# ---- tests -------------------------------------------------------------------------------
$(BUILD)/lib/libskref.a: $(REF_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^ $(if $(REF_OBJS),,)

$(HARNESS_LIB): $(HARNESS_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The mhc reference as a shared library, for bench/peer_mhc_torch.py's check (ctypes).
$(BUILD)/lib/libskref_mhc.so: ops/norm/ref_mhc.c ops/norm/ref_mhc.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests -fPIC -shared -o $@ $< -lm

$(BUILD)/tests/helpers/%: tests/helpers/%.c $(STLIB) $(BUILD)/lib/libskref.a $(HARNESS_LIB)
	@mkdir -p $(@D) $(BUILD)/deps
	$(CC) $(ALL_CFLAGS) $(BIN_DEPFLAGS) -Itests $(ALL_LDFLAGS) -o $@ $< $(HARNESS_LIB) $(BUILD)/lib/libskref.a $(STLIB) $(LDLIBS)

$(BUILD)/tests/test_%: tests/test_%.c $(STLIB) $(BUILD)/lib/libskref.a $(HARNESS_LIB)
	@mkdir -p $(@D) $(BUILD)/deps
	$(CC) $(ALL_CFLAGS) $(BIN_DEPFLAGS) -Itests $(ALL_LDFLAGS) -o $@ $< $(HARNESS_LIB) $(BUILD)/lib/libskref.a $(STLIB) -lcriterion $(LDLIBS)

$(BUILD)/tests/gpu/test_%: tests/gpu/test_%.c $(STLIB) $(BUILD)/lib/libskref.a $(HARNESS_LIB)
	@mkdir -p $(@D) $(BUILD)/deps
	$(CC) $(ALL_CFLAGS) $(BIN_DEPFLAGS) -Itests $(ALL_LDFLAGS) -o $@ $< $(HARNESS_LIB) $(BUILD)/lib/libskref.a $(STLIB) -lcriterion -lcudart_static -lrt $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(STLIB) $(BUILD)/lib/libskref.a $(HARNESS_LIB)
	@mkdir -p $(@D) $(BUILD)/deps
	$(CC) $(ALL_CFLAGS) $(BIN_DEPFLAGS) -Itests -DSK_GIT_COMMIT='"$(GIT_COMMIT)"' $(ALL_LDFLAGS) -o $@ $< $(HARNESS_LIB) $(BUILD)/lib/libskref.a $(STLIB) -lcudart_static -lrt $(LDLIBS)

test: lib tools $(TEST_BINS) $(HELPER_BINS) $(STUB_DRIVER)
	@SK_BUILD=$(BUILD) $(if $(filter 1,$(SAN)),LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp) sh tests/run-suites.sh $(TEST_BINS)

gpu-bins: lib tools $(GPU_TEST_BINS) $(HELPER_BINS) $(BENCH_BINS) $(BUILD)/lib/libskref_mhc.so

gpu-test: gpu-bins
	@SK_BUILD=$(BUILD) sh tests/run-suites.sh $(GPU_TEST_BINS)

bench: lib tools $(BENCH_BINS)
	@SK_BUILD=$(BUILD) sh bench/run-benches.sh $(BENCH_BINS)

# A stand-in CUDA driver that does nothing (tests/stub/libcuda_stub.c): host paths run end to end
# on it without a GPU (test_comm_stub, through SPARKINFER_CUDA_DRIVER), and bench_host_mm measures
# the library's own host cost per call on it.
$(STUB_DRIVER): tests/stub/libcuda_stub.c
	@mkdir -p $(@D)
	$(CC) -std=c11 $(WARN) $(CFLAGS) -D_GNU_SOURCE -fPIC -shared -fvisibility=hidden -pthread -o $@ $<

# OLD=DIR also runs bench_host_mm built against another tree's library (DIR/include,
# DIR/build/lib/libsparkinfer.a: `make lib` there first), side by side on the same CPU.
bench-host: lib $(STUB_DRIVER) $(BUILD)/bench/bench_host $(BUILD)/bench/bench_host_mm
	$(BUILD)/bench/bench_host
	SPARKINFER_CACHE_DIR=$(BUILD)/stub/cache LD_LIBRARY_PATH=$(BUILD)/stub $(BUILD)/bench/bench_host_mm
ifneq ($(OLD),)
	$(CC) -std=c11 $(CFLAGS) -I$(OLD)/include -I$(CUDA_HOME)/include \
	  -DSK_GIT_COMMIT='"'$$(git -C $(OLD) rev-parse --short HEAD)'"' -o $(BUILD)/stub/bench_host_mm-old \
	  bench/bench_host_mm.c $(OLD)/build/lib/libsparkinfer.a $(LDLIBS)
	SPARKINFER_CACHE_DIR=$(BUILD)/stub/cache-old LD_LIBRARY_PATH=$(BUILD)/stub $(BUILD)/stub/bench_host_mm-old
endif

# ---- manifests ---------------------------------------------------------------------------
# Model manifests (tools/manifests/models/*.json) hold op caps per model; the kernel lists are
# derived from them by the ops' own selection (sk-warm). coverage.json reaches every configuration
# for CI; direct.json lists the kernels tests launch directly.
MODEL_MANIFESTS := $(filter-out tools/manifests/models/coverage.json,$(sort $(wildcard tools/manifests/models/*.json)))
ALL_MANIFESTS := $(sort $(wildcard tools/manifests/models/*.json)) tools/manifests/direct.json

# Compile every kernel those manifests expand to for every target arch (tests/test_compile_check.c
# does the same, and fails on new register spills).
compile-check: tools
	$(BUILD)/bin/sk-warm $(foreach m,$(ALL_MANIFESTS),--manifest $(m)) --arch sm_90a,sm_120a,sm_121a \
	  --cache-dir $(BUILD)/compile-check-cache -j 2

# The expanded kernel lists, one file per arch (for review and for shipping prebuilt caches).
kernel-lists: tools
	@mkdir -p $(BUILD)/manifests
	for a in sm_90a sm_120a sm_121a; do $(BUILD)/bin/sk-warm $(foreach m,$(ALL_MANIFESTS),--manifest $(m)) \
	  --arch $$a --emit-kernels $(BUILD)/manifests/kernels-$$a.json || exit 1; done

# ---- demo --------------------------------------------------------------------------------
DEMO_CACHE ?= $(BUILD)/demo-cache
demo: tools
	@echo "== sk-warm: prebuilding the model manifests ($(notdir $(MODEL_MANIFESTS))) for sm_120a and sm_121a into $(DEMO_CACHE)"
	$(BUILD)/bin/sk-warm $(foreach m,$(MODEL_MANIFESTS),--manifest $(m)) --arch sm_120a,sm_121a \
	  --cache-dir $(DEMO_CACHE) -j 2
	@echo "== sk-cache ls"
	$(BUILD)/bin/sk-cache --cache-dir $(DEMO_CACHE) ls
	@echo "== sk-cache stat"
	$(BUILD)/bin/sk-cache --cache-dir $(DEMO_CACHE) stat

# ---- install -----------------------------------------------------------------------------
install: lib tools
	install -d $(DESTDIR)$(PREFIX)/include/sparkinfer $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/bin
	install -m 0644 include/sparkinfer.h $(DESTDIR)$(PREFIX)/include/
	install -m 0644 include/sparkinfer/*.h $(DESTDIR)$(PREFIX)/include/sparkinfer/
	install -m 0755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libsparkinfer.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libsparkinfer.so.$(SOMAJOR)
	ln -sf libsparkinfer.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libsparkinfer.so
	install -m 0644 $(STLIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 0755 $(TOOL_BINS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' -e 's|@CUDA_HOME@|$(CUDA_HOME)|g' \
	  tools/sparkinfer.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/sparkinfer.pc

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/deps -name '*.d' 2>/dev/null)
