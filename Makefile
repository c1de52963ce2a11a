# tensor.h - build, test, benchmark. CC is overridable: make test CC=clang
CC      ?= cc
CXX     ?= c++
CFLAGS  ?= -O2 -g
WARN     = -std=c11 -Wall -Wextra -Werror
LDLIBS   = -lm -lpthread -ldl
HEADERS  = tensor.h tensor_ops.h $(wildcard tensor_cuda.h) $(wildcard tests/gpu/*.h) $(wildcard tests/*.h)
CUDA_INC = $(or $(CUDA_PATH),/usr/local/cuda)/include
BUILD   ?= build
# Parallel by default: one job per core (make -jN still chooses).
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

TESTS    = $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))
CXXTESTS = $(patsubst tests/%.cpp,$(BUILD)/%,$(wildcard tests/test_*.cpp))
EXAMPLES = $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c))

.PHONY: all install uninstall test test-gpu test-examples sanitize tsan fuzz fuzz-libfuzzer examples bench run clean
all: $(TESTS) $(CXXTESTS) $(EXAMPLES)

# Build once: the implementation is compiled once per build folder (its
# CFLAGS: plain, sanitizers, ThreadSanitizer) into $(BUILD)/tensor_cpu.o
# (tensor.h and tensor_ops.h) and $(BUILD)/tensor_impl.o (with tensor_cuda.h),
# and every test that uses only the public API and the internals tensor.h
# declares (its >>backend_api section) links tensor_cpu.o: the headers'
# _DONE guards skip the test's own copy. The self tests read the
# implementation's private functions and state, so they compile it: they are
# built in two groups (tests/self_tests.c), SELF_CPU with tensor.h and
# SELF_CUDA with tensor_cuda.h, and $(BUILD)/test_x is a link to its group's
# program, which runs the test its name says. The CPU group is compiled into
# tensor_cpu.o itself (with the allocator counted, tests/alloc_hooks.h, which
# fails nothing unless a test asks), so the implementation is compiled once
# for both; tests/self_main.c makes it the program self_cpu. Every test still
# builds alone with `cc -I. tests/test_x.c -lm -lpthread -ldl` (tests/gpu/run_gpu.sh does so).
# TEST_OPT follows CFLAGS in the tests that link tensor_cpu.o (their own
# code only): CI's make test gives -Og, make sanitize -O0.
SELF_CPU  = test_alloc_fail test_function test_ew test_linalg test_threads test_random
SELF_CUDA = test_profile test_place_rewire test_kcache test_nvrtc test_nvrtc_reduce test_cuda test_cuda_fallback \
            test_cuda_func test_cuda_place test_cuda_reduce test_multi test_cuda_multi test_cuda_ops
IMPL_DONE = -DTENSOR_IMPLEMENTATION_DONE -DTENSOR_CUDA_IMPLEMENTATION_DONE
$(BUILD)/tensor_cpu.o: tests/self_tests.c $(SELF_CPU:%=tests/%.c) $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -I. -DSELF_GROUP_CPU -DSELF_OBJECT -c -o $@ $<
$(BUILD)/%: tests/%.c tests/harness.h $(BUILD)/tensor_cpu.o $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) $(TEST_OPT) -I. $(IMPL_DONE) -o $@ $< $(BUILD)/tensor_cpu.o $(LDLIBS)
$(BUILD)/self_cpu: tests/self_main.c $(BUILD)/tensor_cpu.o | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -o $@ $< $(BUILD)/tensor_cpu.o $(LDLIBS)
$(BUILD)/self_cuda: tests/self_tests.c $(SELF_CUDA:%=tests/%.c) $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) $(SELF_CUDA_OPT) -I. -DSELF_GROUP_CUDA $(SELF_DEFS) -o $@ $< $(LDLIBS)
$(addprefix $(BUILD)/,$(SELF_CPU)): $(BUILD)/self_cpu
	ln -sf self_cpu $@
$(addprefix $(BUILD)/,$(SELF_CUDA)): $(BUILD)/self_cuda
	ln -sf self_cuda $@
# The declarations test compiles ours beside the real CUDA headers when they exist.
$(BUILD)/test_cuda_decls: tests/test_cuda_decls.c tests/harness.h $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -I. $(if $(wildcard $(CUDA_INC)/cuda.h),-I$(CUDA_INC)) -o $@ $< $(LDLIBS)
# C++ tests link the implementation compiled as C (tensor_cpu.o), except
# test_cxx_impl, which compiles it as C++ (tests/check_cxx.sh checks C++11
# and C++17 with g++ and clang++), at -O0 whatever CFLAGS say: it checks that
# the C++ build runs right, in a quarter of an -O2 build's time (the sanitizer
# runs leave it out: the same code is checked there compiled as C). It builds
# with clang++ where installed (CXX_IMPL; at -O0 clang++ takes half of g++'s
# time: 12 -> 6 s of CPU), and check_cxx.sh checks the other compiler's
# C++17 build of the three headers (TN_CXX_IMPL says which it leaves out).
CXX_IMPL ?= $(if $(shell command -v clang++ 2>/dev/null),clang++,$(CXX))
$(BUILD)/%: tests/%.cpp $(BUILD)/tensor_cpu.o $(HEADERS) | $(BUILD)
	$(CXX) -std=c++11 -Wall -Wextra -Werror $(CFLAGS) $(TEST_OPT) -I. -o $@ $< $(BUILD)/tensor_cpu.o $(LDLIBS)
$(BUILD)/test_cxx_impl: tests/test_cxx_impl.cpp tests/harness.h $(HEADERS) | $(BUILD)
	$(CXX_IMPL) -std=c++17 -Wall -Wextra -Werror -O0 -I. -o $@ $< $(LDLIBS)
# Examples share one compiled implementation here (the headers' _DONE guards
# skip each file's own); make test-examples checks the one-command builds.
$(BUILD)/tensor_impl.o: $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -I. -DTENSOR_IMPLEMENTATION -x c -c -o $@ tensor_cuda.h
$(BUILD)/%: examples/%.c $(BUILD)/tensor_impl.o $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -I. $(IMPL_DONE) -o $@ $< $(BUILD)/tensor_impl.o $(LDLIBS)
$(BUILD):
	mkdir -p $(BUILD)

# tests/dlpack_numpy.py trades arrays with NumPy through ctypes: the library
# and tests/dlpack_peer.c as a shared library, a -fPIC build of its own without
# CFLAGS (unoptimised, it builds in seconds; a sanitizer build could not be
# loaded into Python), with clang where installed (8 -> 4 s of CPU; gcc's
# -O0 build of the same code is check_consumers.sh's pkg-config build).
PEER_CC ?= $(if $(shell command -v clang 2>/dev/null),clang,$(CC))
$(BUILD)/libdlpack_peer.so: tests/dlpack_peer.c $(HEADERS) | $(BUILD)
	$(PEER_CC) $(WARN) -O0 -fPIC -shared -I. -o $@ tests/dlpack_peer.c $(LDLIBS)

test: $(TESTS) $(CXXTESTS) $(BUILD)/libdlpack_peer.so
	@TN_DLPACK_PEER=$(BUILD)/libdlpack_peer.so TN_IMPL_OBJ=$(BUILD)/tensor_cpu.o TN_CXX_IMPL=$(CXX_IMPL) tests/run.sh tests/check_house.sh tests/check_run.sh tests/check_consumers.sh \
		tests/check_cxx.sh tests/check_readme.sh tests/dlpack_numpy.py $(TESTS) $(CXXTESTS)

test-gpu:
	tests/gpu/run_gpu.sh

# Under the sanitizers: every test of the library's own code. The CUDA and
# NVRTC tests are left out (they skip without a GPU, or only hand generated
# text to NVRTC, and each costs a minute to build with the sanitizers).
# (SELF_NO_GPU_TESTS leaves the skipped ones out of build-san/self_cuda.)
SAN_SKIP  = test_cuda test_cuda_func test_cuda_ops test_cuda_reduce test_cuda_multi test_cuda_decls test_nvrtc test_nvrtc_reduce test_place_rewire test_smoke \
            test_cxx_impl
SAN_TESTS = $(filter-out $(addprefix build-san/,$(SAN_SKIP)),$(patsubst tests/%.c,build-san/%,$(wildcard tests/test_*.c)) $(patsubst tests/%.cpp,build-san/%,$(wildcard tests/test_*.cpp)))
# -Og: the tests run as fast as at -O1 (their time goes to the sanitizers'
# allocator and checks) and tensor_cpu.o builds in two thirds of the time
# (79 -> 52 s of CPU).
SAN_FLAGS ?= -Og -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# The random-program tests draw other programs here than in make test, a
# quarter as many (they run ~5x slower under the sanitizers), and the vector
# math test sweeps a sixteenth of its bit patterns and edge values.
# The CUDA group's tests there run in a second (the back end's host paths,
# no GPU), and the other tests spend their time in the implementation
# (tensor_cpu.o, -Og), so both build at -O0: half the time of -O1.
sanitize:
	$(MAKE) BUILD=build-san CFLAGS="$(SAN_FLAGS)" SELF_DEFS=-DSELF_NO_GPU_TESTS SELF_CUDA_OPT=-O0 TEST_OPT=-O0 $(SAN_TESTS)
	@TN_FUZZ_FIRST=40000 TN_FUZZ_SEEDS=10000 TN_RANDOM_FIRST=10000 TN_RANDOM_N=2500 TN_VMATH_SPARSE=16 tests/run.sh $(SAN_TESTS)

# The API fuzzer (tests/test_fuzz.c), long: FUZZ_SEEDS programs under the
# sanitizers, float-to-int overflow included (make test and make sanitize run
# a bounded count). It names every 1000th seed, so a UBSan report (which ends
# the run) points at a window: TN_FUZZ_FIRST=k TN_FUZZ_PROGRESS=1
# build-fuzz/test_fuzz 1000 finds the seed, TN_FUZZ_SEED=k replays it.
FUZZ_SEEDS ?= 100000
FUZZ_SAN_FLAGS ?= $(SAN_FLAGS) -fsanitize=float-cast-overflow -fno-sanitize-recover=float-cast-overflow
fuzz:
	$(MAKE) BUILD=build-fuzz CFLAGS="$(FUZZ_SAN_FLAGS)" build-fuzz/test_fuzz
	TN_FUZZ_PROGRESS=1000 build-fuzz/test_fuzz $(FUZZ_SEEDS)

# The same program generator under libFuzzer (clang), guided by coverage, until
# stopped or FUZZ_ARGS say otherwise (-max_total_time=600, a corpus folder).
# Huge shapes are part of the programs: their allocations must fail, not stop the run.
fuzz-libfuzzer: | $(BUILD)
	clang $(WARN) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DFUZZ_LIBFUZZER \
		-I. -o $(BUILD)/fuzz_libfuzzer tests/test_fuzz.c $(LDLIBS)
	$(BUILD)/fuzz_libfuzzer -malloc_limit_mb=2147483647 $(FUZZ_ARGS)

# The threads test under ThreadSanitizer: a data race fails the run. At -O0
# (every access as written): it builds in half the time of -O1 and runs in
# seconds either way (26 + 3 -> 13 + 5 s of CPU).
TSAN_TESTS = build-tsan/test_threads
TSAN_FLAGS ?= -O0 -g1 -fsanitize=thread
tsan:
	@mkdir -p build-tsan
	$(CC) $(WARN) $(TSAN_FLAGS) -I. -o build-tsan/test_threads tests/test_threads.c $(LDLIBS)
	@TSAN_OPTIONS="halt_on_error=1 $(TSAN_OPTIONS)" tests/run.sh $(TSAN_TESTS)

examples: $(EXAMPLES)

# Install the headers, tensor.pc and the CMake package (what cmake --install
# writes, from the same templates in cmake/; README, "Use it in your project").
# The package files find the headers relative to where they lie.
PREFIX  ?= /usr/local
VERSION := $(shell sed -n 's/^\#define TENSOR_VERSION "\([0-9.]*\)"$$/\1/p' tensor.h)
VERSION_PARTS = $(subst ., ,$(VERSION))
INCDIR   = $(DESTDIR)$(PREFIX)/include
PCDIR    = $(DESTDIR)$(PREFIX)/share/pkgconfig
CMAKEDIR = $(DESTDIR)$(PREFIX)/share/cmake/tensor
FILL     = sed -e 's|@TENSOR_VERSION@|$(VERSION)|g' -e 's|@TENSOR_VERSION_MAJOR@|$(word 1,$(VERSION_PARTS))|g' \
               -e 's|@TENSOR_VERSION_MINOR@|$(word 2,$(VERSION_PARTS))|g' \
               -e 's|@TENSOR_PC_INCLUDEDIR@|$${pcfiledir}/../../include|g' \
               -e 's|@TENSOR_CONFIG_INCLUDEDIR@|$${CMAKE_CURRENT_LIST_DIR}/../../../include|g'
install:
	@test -n "$(VERSION)" || { echo "make install: no #define TENSOR_VERSION \"X.Y.Z\" in tensor.h"; exit 1; }
	mkdir -p $(INCDIR) $(PCDIR) $(CMAKEDIR)
	cp tensor.h tensor_ops.h tensor_cuda.h $(INCDIR)/
	$(FILL) cmake/tensor.pc.in > $(PCDIR)/tensor.pc
	$(FILL) cmake/tensorConfig.cmake.in > $(CMAKEDIR)/tensorConfig.cmake
	$(FILL) cmake/tensorConfigVersion.cmake.in > $(CMAKEDIR)/tensorConfigVersion.cmake
	cp cmake/tensorImplementation.cmake $(CMAKEDIR)/
uninstall:
	rm -f $(INCDIR)/tensor.h $(INCDIR)/tensor_ops.h $(INCDIR)/tensor_cuda.h $(PCDIR)/tensor.pc \
	      $(CMAKEDIR)/tensorConfig.cmake $(CMAKEDIR)/tensorConfigVersion.cmake $(CMAKEDIR)/tensorImplementation.cmake
	-rmdir $(CMAKEDIR) 2>/dev/null

# Every example built with the one command in its header, run briefly, its key line checked.
test-examples:
	@sh tests/test_examples.sh $(BUILD)/examples

# The benchmark (bench/README.md). -rdynamic: it finds optional entry points with dlsym.
bench: $(BUILD)/bench
$(BUILD)/bench: bench/bench.c $(HEADERS) | $(BUILD)
	$(CC) $(WARN) $(CFLAGS) -I. -rdynamic -o $@ $< $(LDLIBS)

# A short tour of the examples (README walks through them); well under a minute on a CPU.
run: $(BUILD)/tour $(BUILD)/check1 $(BUILD)/borrow $(BUILD)/speed_test $(BUILD)/logistic_regression $(BUILD)/gpu_op
	$(BUILD)/tour
	$(BUILD)/check1 100
	$(BUILD)/borrow 100
	$(BUILD)/speed_test 5
	$(BUILD)/logistic_regression 1000 | grep -A1 "training steps"
	$(BUILD)/gpu_op

clean:
	rm -rf build build-san build-tsan build-fuzz
