// A small, fast, seedable RNG (xoshiro256**, seeded through splitmix64) with uniform and
// normal draws. Its whole state is 4 words, so checkpoints can store and restore it exactly.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace pldr {

struct Rng {
    std::array<uint64_t, 4> s{};

    explicit Rng(uint64_t seed = 0) { reseed(seed); }
    void reseed(uint64_t seed) {
        for (auto& w : s) {
            seed += 0x9e3779b97f4a7c15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            w = z ^ (z >> 31);
        }
    }
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t next() {
        const uint64_t r = rotl(s[1] * 5, 7) * 9;
        const uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return r;
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    // Standard normal (Box–Muller; one draw per call, no cached state).
    double normal() {
        double u1 = uniform();
        while (u1 <= 0) u1 = uniform();
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
    // Uniform integer in [0, n).
    uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

}  // namespace pldr
