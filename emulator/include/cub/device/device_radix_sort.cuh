// cub/device/device_radix_sort.cuh for the CPU build: cub::DeviceRadixSort::SortPairsDescending
// with CUB's contract — a first call with no scratch reports the scratch bytes needed; the sort is
// stable (equal keys keep their input order) and orders floats as CUB's radix sort does, by their
// bits made monotone (so -0.0 sorts below +0.0).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../../emulator.hpp"

namespace cub {

struct DeviceRadixSort {
    // The unsigned integer whose order is the key's order (CUB's "twiddle" for floats).
    template <typename Key>
    static std::uint64_t ordered_bits(Key key) {
        if constexpr (std::is_same_v<Key, float>) {
            std::uint32_t u;
            std::memcpy(&u, &key, 4);
            return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
        } else {
            static_assert(std::is_integral_v<Key>, "keys are float or integers");
            return static_cast<std::uint64_t>(key) ^ (std::is_signed_v<Key> ? (std::uint64_t{1} << (8 * sizeof(Key) - 1)) : 0);
        }
    }

    template <typename Key, typename Value, typename NumItems>
    static cudaError_t SortPairsDescending(void* scratch, std::size_t& scratch_bytes, const Key* keys_in,
                                           Key* keys_out, const Value* values_in, Value* values_out,
                                           NumItems num_items, int begin_bit = 0,
                                           int end_bit = sizeof(Key) * 8, cudaStream_t = nullptr) {
        const std::size_t n = static_cast<std::size_t>(num_items);
        const std::size_t needed = n * sizeof(std::size_t) + 1;  // an index per item
        if (scratch == nullptr) {
            scratch_bytes = needed;
            return cudaSuccess;
        }
        if (scratch_bytes < needed || begin_bit != 0 || end_bit != static_cast<int>(sizeof(Key) * 8))
            return cudaErrorInvalidValue;
        std::vector<std::size_t> order(n);
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return ordered_bits(keys_in[a]) > ordered_bits(keys_in[b]);
        });
        std::vector<Key> keys(n);
        std::vector<Value> values(n);
        for (std::size_t i = 0; i < n; ++i) {
            keys[i] = keys_in[order[i]];
            values[i] = values_in[order[i]];
        }
        std::copy(keys.begin(), keys.end(), keys_out);
        std::copy(values.begin(), values.end(), values_out);
        return cudaSuccess;
    }
};

}  // namespace cub
