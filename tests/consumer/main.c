/* Loads a model with the installed pldr C API and generates text (greedy, 16 tokens). */
#include <pldr/pldr.h>
#include <stdio.h>

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: consumer_c MODEL_DIR\n");
        return 2;
    }
    pldr_model* m = NULL;
    if (pldr_model_load(argv[1], "f32", &m) != PLDR_OK) {
        fprintf(stderr, "consumer_c: error: %s\n", pldr_last_error());
        return 1;
    }
    pldr_generate_options o = pldr_generate_default_options();
    o.max_tokens = 16;
    o.sampling.greedy = 1;
    char* text = NULL;
    if (pldr_generate(m, "The state of the Union is", &o, NULL, NULL, &text) != PLDR_OK) {
        fprintf(stderr, "consumer_c: error: %s\n", pldr_last_error());
        pldr_model_free(m);
        return 1;
    }
    printf("%s|%s\n", pldr_version(), text);
    pldr_string_free(text);
    pldr_model_free(m);
    return 0;
}
