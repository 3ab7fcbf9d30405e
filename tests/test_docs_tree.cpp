// docs/architecture.md's module table says what is true: every file pattern it lists matches a
// file of its module's directory, every source file of src/ and tools/pldr/ is matched by a
// pattern of its module's row, and every directory of src/ has a row.
#include <fnmatch.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kRoot = PLDR_SOURCE_DIR;

// module → its file patterns, from the table of docs/architecture.md.
std::map<std::string, std::vector<std::string>> module_table() {
    std::ifstream f(kRoot + "/docs/architecture.md");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    std::map<std::string, std::vector<std::string>> t;
    const size_t start = text.find("| module | files | role |");
    if (start == std::string::npos) return t;
    std::istringstream lines(text.substr(start));
    std::string line;
    std::getline(lines, line);  // header
    std::getline(lines, line);  // |---|
    const std::regex tick("`([^`]+)`");
    while (std::getline(lines, line) && !line.empty() && line[0] == '|') {
        const size_t a = line.find('|', 1);
        const size_t b = line.find(" | ", a + 1);  // the files cell ends at the next cell
        std::string module = line.substr(1, a - 1);
        module = module.substr(module.find_first_not_of(' '));
        module = module.substr(0, module.find_last_not_of(' ') + 1);
        const std::string files = line.substr(a + 1, b - a - 1);
        auto& pats = t[module];
        for (std::sregex_iterator it(files.begin(), files.end(), tick), end; it != end; ++it)
            pats.push_back((*it)[1]);
    }
    return t;
}

std::string dir_of(const std::string& module) {
    return module.find('/') == std::string::npos ? "src/" + module : module;
}

std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(kRoot + "/" + dir)) {
        const std::string ext = e.path().extension().string();
        if (e.is_regular_file() && (ext == ".h" || ext == ".cpp"))
            v.push_back(e.path().filename().string());
    }
    return v;
}

TEST(DocsTree, ArchitectureTableMatchesTheTree) {
    const auto table = module_table();
    ASSERT_GE(table.size(), 9u) << "module table not found in docs/architecture.md";
    // Every directory of src/ has a row.
    for (const auto& e : fs::directory_iterator(kRoot + "/src")) {
        if (!e.is_directory()) continue;
        EXPECT_TRUE(table.count(e.path().filename().string()))
            << "src/" << e.path().filename().string() << " has no row";
    }
    for (const auto& [module, pats] : table) {
        const std::string dir = dir_of(module);
        ASSERT_TRUE(fs::is_directory(kRoot + "/" + dir)) << module << ": no directory " << dir;
        const std::vector<std::string> files = files_in(dir);
        std::set<std::string> matched;
        for (const std::string& p : pats) {
            int n = 0;
            for (const std::string& f : files)
                if (fnmatch(p.c_str(), f.c_str(), 0) == 0) {
                    matched.insert(f);
                    ++n;
                }
            EXPECT_GT(n, 0) << module << ": `" << p << "` matches no file of " << dir;
        }
        for (const std::string& f : files)
            EXPECT_TRUE(matched.count(f)) << dir << "/" << f << " is not in the module table";
    }
}

}  // namespace
