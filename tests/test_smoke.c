#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
TEST(test_headers_compile) { CHECK(TN_OP_COUNT > TN_OP_CAST, "op enum"); }
int main(void) { TH_RUN(test_headers_compile); TH_END(); }
