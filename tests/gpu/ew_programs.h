/* tests/gpu/ew_programs.h - elementwise programs for the CUDA tests: a
   builder, and the one-op program of each table row for a dtype, typed as
   tensor_ops.h's rules say. Included by the CUDA and NVRTC tests (build_fused: gpu/ew_fused.h). */
#ifndef TN_TEST_EW_PROGRAMS_H
#define TN_TEST_EW_PROGRAMS_H

typedef struct prog_buf {
    tn_ew_program p;
    tn_dtype in_dtype[8];
    tn_ew_instr instr[32];
    int32_t out_reg[8];
    tn_dtype out_dtype[8];
} prog_buf;

static void pb_init(prog_buf *b, int n_in, const tn_dtype *in) {
    memset(b, 0, sizeof *b);
    b->p.n_in = n_in;
    for (int i = 0; i < n_in; i++) b->in_dtype[i] = in[i];
    b->p.in_dtype = b->in_dtype;
    b->p.instr = b->instr;
    b->p.out_reg = b->out_reg;
    b->p.out_dtype = b->out_dtype;
}
static int pb_op(prog_buf *b, int op, tn_dtype dt, tn_dtype in_dt, int a, int bb, int c) {
    tn_ew_instr *in = &b->instr[b->p.n_instr++];
    *in = (tn_ew_instr){ .op = (int16_t)op, .dtype = (int8_t)dt, .in_dtype = (int8_t)in_dt, .a = a, .b = bb, .c = c };
    return b->p.n_in + b->p.n_instr - 1;
}
static int pb_imm(prog_buf *b, tn_dtype dt, double v) {
    int r = pb_op(b, TN_OP_CONSTANT, dt, dt, -1, -1, -1);
    b->instr[b->p.n_instr - 1].imm = v;
    return r;
}
static void pb_out(prog_buf *b, int reg, tn_dtype dt) {
    b->out_reg[b->p.n_out] = reg;
    b->out_dtype[b->p.n_out++] = dt;
}
static tn_dtype reg_dt(const prog_buf *b, int r) {
    return r < b->p.n_in ? b->in_dtype[r] : (tn_dtype)b->instr[r - b->p.n_in].dtype;
}
/* A register converted to dtype t (a CAST instruction when needed). */
static int pb_as(prog_buf *b, int r, tn_dtype t) {
    return reg_dt(b, r) == t ? r : pb_op(b, TN_OP_CAST, t, reg_dt(b, r), r, -1, -1);
}

/* The program of op applied to inputs of dtype t, typed as tensor_ops.h's
   rules say (FLOAT ops on ints read float64, LOGIC reads bool, ...); false
   when the op takes no such dtype. */
static bool build_op_program(prog_buf *b, int op, tn_dtype t) {
    const tn_ew_info *e = tn__ew_info(op);
    tn_dtype in[3] = { t, t, t };
    if (e->kind == TN_EWK_WHERE) in[0] = TN_BOOL;
    pb_init(b, e->arity, in);
    tn_dtype id = t, res;
    switch (e->kind) {
    case TN_EWK_FLOAT: id = tn_dtype_is_float(t) ? t : TN_F64; res = id; break;
    case TN_EWK_CMP: res = TN_BOOL; break;
    case TN_EWK_LOGIC: id = TN_BOOL; res = TN_BOOL; break;
    case TN_EWK_CAST: return false;     /* covered by test_casts */
    default: res = t; break;
    }
    int r[3] = { 0, 1, 2 };
    for (int i = 0; i < e->arity; i++)
        if (!(e->kind == TN_EWK_WHERE && i == 0)) r[i] = pb_as(b, i, id);
    int o = pb_op(b, op, res, id, r[0], e->arity > 1 ? r[1] : -1, e->arity > 2 ? r[2] : -1);
    pb_out(b, o, res);
    return true;
}

#endif
