/* array: implementation part of tensor.h (in progress) */
