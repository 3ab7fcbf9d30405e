// Loads a model with the installed pldr C++ API and generates text (greedy, 16 tokens).
#include <pldr/pldr.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: consumer_cpp MODEL_DIR\n");
        return 2;
    }
    try {
        const pldr::api::Model m = pldr::api::Model::load(argv[1]);
        pldr::api::GenerateOptions o;
        o.max_tokens = 16;
        o.sampling.greedy = true;
        const pldr::api::Generation g = m.generate("The state of the Union is", o);
        std::printf("%s|%zu tokens|%s\n", pldr::api::version(), g.ids.size(), g.text.c_str());
        return g.ids.empty() ? 1 : 0;
    } catch (const pldr::Error& e) {
        std::fprintf(stderr, "consumer_cpp: error: %s\n", e.what());
        return 1;
    }
}
