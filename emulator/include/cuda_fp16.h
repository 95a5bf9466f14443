// cuda_fp16.h for the CPU build: the glass CUDA emulator provides the subset glass uses.
#pragma once
#include "../emulator.hpp"
