/* The implementation half of the C++ test: compiled as C, linked with test_cxx.cpp. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
