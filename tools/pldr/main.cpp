// pldr: the command-line tool (thin subcommands over libpldr).
#include <cstdio>

int main() {
    std::puts("pldr");
    return 0;
}
