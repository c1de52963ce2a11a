/* DLPack export and import (tensor.h >>dlpack): a round trip shares the
   memory, the deleter runs exactly once and only after the last array or
   view is freed, strides and byte offsets carry over, tensors made by
   another library (here by hand) come in, and what cannot is refused by
   code and words with the tensor left to its owner. The legacy
   (unversioned) functions, what NumPy 1.x and older PyTorch speak, do the
   same through the same code; tests/dlpack_numpy.py trades arrays with
   NumPy itself both ways.

   This file declares DLPack's types itself before including tensor.h, as a
   program that includes dlpack.h first does: tensor.h then uses these, and
   the library (compiled with its own declarations) must agree on the
   layout. They are written from DLPack 1.0's specification (which keeps
   the legacy DLManagedTensor). */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#include <stdint.h>
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLCUDAManaged = 13 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 } DLDataTypeCode;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype; int64_t *shape, *strides; uint64_t byte_offset; } DLTensor;
typedef struct DLManagedTensor { DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *self); } DLManagedTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx; void (*deleter)(struct DLManagedTensorVersioned *self); uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif
#include "tensor.h"
#include "harness.h"

/* The exporter's deleter, counted. */
static int deletes;
static void (*inner_deleter)(DLManagedTensorVersioned *);
static void counting_deleter(DLManagedTensorVersioned *mt) { deletes++; inner_deleter(mt); }
static DLManagedTensorVersioned *export_counted(const tn_array *a) {
    DLManagedTensorVersioned *mt = tn_array_to_dlpack(a);
    if (mt) { inner_deleter = mt->deleter; mt->deleter = counting_deleter; }
    return mt;
}
static void (*inner_deleter_legacy)(DLManagedTensor *);
static void counting_deleter_legacy(DLManagedTensor *mt) { deletes++; inner_deleter_legacy(mt); }
static DLManagedTensor *export_counted_legacy(const tn_array *a) {
    DLManagedTensor *mt = tn_array_to_dlpack_unversioned(a);
    if (mt) { inner_deleter_legacy = mt->deleter; mt->deleter = counting_deleter_legacy; }
    return mt;
}

TEST(test_roundtrip_shares_memory) {
    const int64_t sh[2] = { 3, 4 };
    tn_array *a = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 7);
    deletes = 0;
    DLManagedTensorVersioned *mt = export_counted(a);
    CHECK(mt != NULL, "export: %s", tn_last_error());
    if (!mt) { tn_array_free(a); return; }
    const DLTensor *t = &mt->dl_tensor;
    CHECK(mt->version.major == 1 && mt->flags == 0, "version 1, no flags");
    CHECK(t->device.device_type == kDLCPU && t->device.device_id == 0, "on the CPU");
    CHECK(t->dtype.code == 2 && t->dtype.bits == 32 && t->dtype.lanes == 1, "float32 is kDLFloat (2), 32 bits");
    CHECK(t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4 && t->strides[0] == 4 && t->strides[1] == 1, "shape and strides in elements");
    CHECK((char *)t->data + t->byte_offset == (char *)a->data, "the same memory");
    tn_array *b = tn_array_from_dlpack(mt);
    CHECK(b && b->data == a->data && b->dtype == TN_F32 && b->device == TN_HOST, "imported without a copy: %s", tn_last_error());
    CHECK(tn_array_set(b, (int64_t[]){ 2, 1 }, 42.5) == TN_OK && tn_array_get(a, (int64_t[]){ 2, 1 }) == 42.5, "a write through b shows in a");
    tn_array_free(a);                                   /* the export keeps a's memory */
    tn_array *v = tn_array_slice(b, 0, 1, 3, 1);
    tn_array_free(b);
    CHECK(deletes == 0, "a view still uses the memory");
    CHECK(v && tn_array_get(v, (int64_t[]){ 1, 1 }) == 42.5, "readable after a and b are freed");
    tn_array_free(v);
    CHECK(deletes == 1, "the deleter ran once, after the last view (%d)", deletes);
}

/* A transposed slice: element strides, a byte offset into the buffer. */
TEST(test_strides_and_offset) {
    const int64_t sh[2] = { 5, 6 };
    tn_array *a = tn_array_arange(TN_I64, 0, 30, 1), *m = tn_array_reshape(a, 2, sh);
    tn_array *t0 = tn_array_transpose(m, NULL), *v = tn_array_slice(t0, 0, 1, 6, 2);   /* (3, 5): v[i][j] = m[j][1 + 2i] */
    DLManagedTensorVersioned *mt = tn_array_to_dlpack(v);
    CHECK(mt && mt->dl_tensor.strides[0] == 2 && mt->dl_tensor.strides[1] == 6 && mt->dl_tensor.byte_offset == 8,
          "strides (2, 6) elements, offset 8 bytes: %lld %lld %llu", mt ? (long long)mt->dl_tensor.strides[0] : -1,
          mt ? (long long)mt->dl_tensor.strides[1] : -1, mt ? (unsigned long long)mt->dl_tensor.byte_offset : 0ull);
    tn_array *b = tn_array_from_dlpack(mt);
    bool same = b && b->ndim == 2 && b->shape[0] == 3 && b->shape[1] == 5;
    for (int i = 0; same && i < 3; i++)
        for (int j = 0; j < 5; j++) same = same && tn_array_get(b, (int64_t[]){ i, j }) == (double)(j * 6 + 1 + 2 * i);
    CHECK(same, "the view's values by index");
    tn_array_free(b);
    tn_array_free(v); tn_array_free(t0); tn_array_free(m); tn_array_free(a);
}

TEST(test_every_dtype) {
    const tn_dtype ts[6] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };
    const uint8_t code[6] = { 6, 0, 0, 2, 2, 2 }, bits[6] = { 8, 32, 64, 16, 32, 64 };   /* DLPack's spec */
    for (int k = 0; k < 6; k++) {
        tn_array *a = tn_array_full(ts[k], 1, (int64_t[]){ 3 }, 1);
        DLManagedTensorVersioned *mt = tn_array_to_dlpack(a);
        CHECK(mt && mt->dl_tensor.dtype.code == code[k] && mt->dl_tensor.dtype.bits == bits[k], "%s's code and bits", tn_dtype_name(ts[k]));
        tn_array *b = tn_array_from_dlpack(mt);
        CHECK(b && b->dtype == ts[k] && b->data == a->data, "%s back", tn_dtype_name(ts[k]));
        tn_array_free(b);
        tn_array_free(a);
    }
}

/* A tensor another library made: its own memory and deleter. */
static int foreign_deletes;
static void foreign_deleter(DLManagedTensorVersioned *mt) {
    foreign_deletes++;
    free(mt->dl_tensor.data);
    free(mt);
}
static void foreign_deleter_legacy(DLManagedTensor *mt) {
    foreign_deletes++;
    free(mt->dl_tensor.data);
    free(mt);
}
static void foreign_fill(DLTensor *t, uint8_t code, uint8_t bits, uint16_t lanes, int device_type, int ndim) {
    static int64_t shape[9] = { 2, 3, 1, 1, 1, 1, 1, 1, 1 };
    int64_t *data = (int64_t *)malloc(8 * sizeof(int64_t));
    for (int i = 0; i < 8; i++) data[i] = 100 + i;
    t->data = data;
    t->byte_offset = 16;                            /* the tensor starts at data[2] */
    t->device.device_type = (DLDeviceType)device_type;
    t->ndim = ndim;
    t->dtype.code = code;
    t->dtype.bits = bits;
    t->dtype.lanes = lanes;
    t->shape = shape;
}
static DLManagedTensorVersioned *foreign(uint8_t code, uint8_t bits, uint16_t lanes, int device_type, int ndim) {
    DLManagedTensorVersioned *mt = (DLManagedTensorVersioned *)calloc(1, sizeof *mt);
    mt->version.major = 1;
    mt->deleter = foreign_deleter;
    foreign_fill(&mt->dl_tensor, code, bits, lanes, device_type, ndim);
    return mt;
}
static DLManagedTensor *foreign_legacy(uint8_t code, uint8_t bits, uint16_t lanes, int device_type, int ndim) {
    DLManagedTensor *mt = (DLManagedTensor *)calloc(1, sizeof *mt);
    mt->deleter = foreign_deleter_legacy;
    foreign_fill(&mt->dl_tensor, code, bits, lanes, device_type, ndim);
    return mt;
}

TEST(test_foreign_tensor) {
    foreign_deletes = 0;
    DLManagedTensorVersioned *mt = foreign(kDLInt, 64, 1, kDLCPU, 2);
    tn_array *a = tn_array_from_dlpack(mt);
    CHECK(a && a->dtype == TN_I64 && a->ndim == 2 && a->shape[1] == 3 && tn_array_is_contiguous(a), "compact row-major (strides NULL): %s", tn_last_error());
    CHECK(a && tn_array_get(a, (int64_t[]){ 0, 0 }) == 102 && tn_array_get(a, (int64_t[]){ 1, 2 }) == 107, "from byte_offset on");
    tn_array *c = tn_array_copy(a);
    tn_array_free(a);
    CHECK(foreign_deletes == 1, "deleted once when freed");
    CHECK(c && tn_array_get(c, (int64_t[]){ 1, 0 }) == 105, "a copy outlives it");
    tn_array_free(c);
}

TEST(test_refused) {
    struct { uint8_t code, bits; uint16_t lanes; int dev, ndim, major; tn_result r; const char *words; } bad[] = {
        { kDLUInt, 8, 1, kDLCPU, 2, 1, TN_ERR_DTYPE, "DLPack dtype uint8 (code 1, bits 8, lanes 1) has no dtype here" },
        { kDLBfloat, 16, 1, kDLCPU, 2, 1, TN_ERR_DTYPE, "bfloat16" },
        { kDLComplex, 64, 1, kDLCPU, 2, 1, TN_ERR_DTYPE, "complex64" },
        { kDLFloat, 32, 4, kDLCPU, 2, 1, TN_ERR_DTYPE, "with several lanes" },
        { kDLInt, 64, 1, kDLOpenCL, 2, 1, TN_ERR_UNSUPPORTED, "DLPack device type 4" },
        { kDLInt, 64, 1, kDLCUDA, 2, 1, TN_ERR_DEVICE, "no CUDA back end is loaded" },
        { kDLInt, 64, 1, kDLCPU, 9, 1, TN_ERR_SHAPE, "ndim 9 is outside [0, TN_MAX_DIMS = 8]" },
        { kDLInt, 64, 1, kDLCPU, 2, 2, TN_ERR_UNSUPPORTED, "DLPack major version 2 (this takes 1)" },
    };
    foreign_deletes = 0;
    int legacy_cases = 0;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        DLManagedTensorVersioned *mt = foreign(bad[k].code, bad[k].bits, bad[k].lanes, bad[k].dev, bad[k].ndim);
        mt->version.major = (uint32_t)bad[k].major;
        tn_clear_error();
        CHECK(tn_array_from_dlpack(mt) == NULL, "case %zu refused", k);
        CHECK_ERR(bad[k].r, bad[k].words);
        CHECK(strstr(tn_last_error(), "tn_array_from_dlpack: ") == tn_last_error(), "names the function: %s", tn_last_error());
        mt->deleter(mt);                            /* refused: still the caller's */
        if (bad[k].major != 1) continue;            /* a legacy tensor has no version */
        DLManagedTensor *lt = foreign_legacy(bad[k].code, bad[k].bits, bad[k].lanes, bad[k].dev, bad[k].ndim);
        tn_clear_error();
        CHECK(tn_array_from_dlpack_unversioned(lt) == NULL, "legacy case %zu refused", k);
        CHECK_ERR(bad[k].r, bad[k].words);
        CHECK(strstr(tn_last_error(), "tn_array_from_dlpack_unversioned: ") == tn_last_error(), "names the function: %s",
              tn_last_error());
        lt->deleter(lt);
        legacy_cases++;
    }
    CHECK(foreign_deletes == (int)(sizeof bad / sizeof bad[0]) + legacy_cases, "each deleted once, by its owner (%d)", foreign_deletes);
    tn_clear_error();
    CHECK(tn_array_from_dlpack(NULL) == NULL, "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_array_from_dlpack: mt is NULL");
    CHECK(tn_array_to_dlpack(NULL) == NULL, "NULL export");
    CHECK_ERR(TN_ERR_NULL, "tn_array_to_dlpack");
    CHECK(tn_array_from_dlpack_unversioned(NULL) == NULL, "legacy NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_array_from_dlpack_unversioned: mt is NULL");
    CHECK(tn_array_to_dlpack_unversioned(NULL) == NULL, "legacy NULL export");
    CHECK_ERR(TN_ERR_NULL, "tn_array_to_dlpack_unversioned");
}

/* Legacy DLPack: every dtype through tn_array_to_dlpack_unversioned and
   back, the same memory, the deleter once after the last array. */
TEST(test_legacy_roundtrip) {
    const tn_dtype ts[6] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };
    const uint8_t code[6] = { 6, 0, 0, 2, 2, 2 }, bits[6] = { 8, 32, 64, 16, 32, 64 };
    tn_array *r = tn_array_arange(TN_F64, 0, 12, 1), *m = tn_array_reshape(r, TN_SHAPE(3, 4));
    for (int k = 0; k < 6; k++) {
        const char *n = tn_dtype_name(ts[k]);
        tn_array *a = tn_array_astype(m, ts[k]);
        deletes = 0;
        DLManagedTensor *mt = export_counted_legacy(a);
        CHECK(mt != NULL, "%s: export: %s", n, tn_last_error());
        if (!mt) { tn_array_free(a); continue; }
        const DLTensor *t = &mt->dl_tensor;
        CHECK(t->dtype.code == code[k] && t->dtype.bits == bits[k] && t->dtype.lanes == 1, "%s's code and bits", n);
        CHECK(t->device.device_type == kDLCPU && t->device.device_id == 0, "%s on the CPU", n);
        CHECK(t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4 && t->strides[0] == 4 && t->strides[1] == 1,
              "%s: shape and strides in elements", n);
        CHECK((char *)t->data + t->byte_offset == (char *)a->data, "%s: the same memory", n);
        tn_array *b = tn_array_from_dlpack_unversioned(mt);
        CHECK(b && b->data == a->data && b->dtype == ts[k] && b->ndim == 2 && b->shape[0] == 3 && b->shape[1] == 4,
              "%s: imported without a copy: %s", n, tn_last_error());
        if (!b) { mt->deleter(mt); tn_array_free(a); continue; }
        CHECK(tn_array_get(a, (int64_t[]){ 2, 1 }) == (ts[k] == TN_BOOL ? 1 : 9), "%s: a's value", n);
        CHECK(tn_array_set(b, (int64_t[]){ 2, 1 }, 0) == TN_OK && tn_array_get(a, (int64_t[]){ 2, 1 }) == 0,
              "%s: a write through b shows in a", n);
        tn_array_free(a);
        CHECK(deletes == 0 && tn_array_get(b, (int64_t[]){ 2, 3 }) == (ts[k] == TN_BOOL ? 1 : 11), "%s: b outlives a", n);
        tn_array_free(b);
        CHECK(deletes == 1, "%s: the deleter ran once (%d)", n, deletes);
    }
    tn_array_free(m); tn_array_free(r);
}

/* A transposed slice out and back through the legacy struct: element
   strides, a byte offset, and a view of the import that outlives it. */
TEST(test_legacy_strides) {
    tn_array *a = tn_array_arange(TN_F32, 0, 30, 1), *m = tn_array_reshape(a, TN_SHAPE(5, 6));
    tn_array *t0 = tn_array_transpose(m, NULL), *v = tn_array_slice(t0, 0, 1, 6, 2);   /* (3, 5): v[i][j] = m[j][1 + 2i] */
    deletes = 0;
    DLManagedTensor *mt = export_counted_legacy(v);
    CHECK(mt && mt->dl_tensor.strides[0] == 2 && mt->dl_tensor.strides[1] == 6 && mt->dl_tensor.byte_offset == 4,
          "strides (2, 6) elements, offset 4 bytes");
    tn_array_free(v); tn_array_free(t0); tn_array_free(m); tn_array_free(a);   /* the export keeps the memory */
    tn_array *b = mt ? tn_array_from_dlpack_unversioned(mt) : NULL;
    CHECK(b && !tn_array_is_contiguous(b) && b->strides[0] == 8 && b->strides[1] == 24, "byte strides (8, 24): %s", tn_last_error());
    bool same = b && b->ndim == 2 && b->shape[0] == 3 && b->shape[1] == 5;
    for (int i = 0; same && i < 3; i++)
        for (int j = 0; j < 5; j++) same = same && tn_array_get(b, (int64_t[]){ i, j }) == (double)(j * 6 + 1 + 2 * i);
    CHECK(same, "the view's values by index");
    tn_array *row = b ? tn_array_slice(b, 0, 2, 3, 1) : NULL;
    tn_array_free(b);
    CHECK(deletes == 0 && row && tn_array_get(row, (int64_t[]){ 0, 4 }) == 29, "a view of the import keeps it");
    tn_array_free(row);
    CHECK(deletes == 1, "the deleter ran once, after the last view (%d)", deletes);
}

/* A legacy tensor another library made: its strides (column-major here)
   and byte offset, its deleter once. */
TEST(test_legacy_foreign) {
    static int64_t fstrides[2] = { 1, 2 };
    foreign_deletes = 0;
    DLManagedTensor *mt = foreign_legacy(kDLInt, 64, 1, kDLCPU, 2);
    mt->dl_tensor.strides = fstrides;
    tn_array *a = tn_array_from_dlpack_unversioned(mt);
    CHECK(a && a->dtype == TN_I64 && a->shape[0] == 2 && a->shape[1] == 3 && a->strides[0] == 8 && a->strides[1] == 16,
          "column-major strides in bytes: %s", tn_last_error());
    if (!a) { mt->deleter(mt); return; }
    CHECK((char *)a->data == (char *)mt->dl_tensor.data + 16, "from byte_offset on, not copied");
    bool same = true;
    for (int i = 0; same && i < 2; i++)
        for (int j = 0; j < 3; j++) same = same && tn_array_get(a, (int64_t[]){ i, j }) == 102 + i + 2 * j;
    CHECK(same, "a[i][j] = data[2 + i + 2j]");
    tn_array_free(a);
    CHECK(foreign_deletes == 1, "deleted once when freed (%d)", foreign_deletes);
}

int main(void) {
    TH_RUN(test_roundtrip_shares_memory);
    TH_RUN(test_strides_and_offset);
    TH_RUN(test_every_dtype);
    TH_RUN(test_foreign_tensor);
    TH_RUN(test_refused);
    TH_RUN(test_legacy_roundtrip);
    TH_RUN(test_legacy_strides);
    TH_RUN(test_legacy_foreign);
    TH_END();
}
