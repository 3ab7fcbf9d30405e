// docs/architecture.md's module table says what is true: every file pattern it lists matches a
// file of its module's directory, every source file of src/ and tools/pldr/ is matched by a
// pattern of its module's row, and every directory of src/ has a row. Its layer matrix is the one
// tests/check_layers.sh enforces, and docs/api.md's table lists exactly the headers of
// include/pldr/.
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

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The rows of the markdown table that starts with `header` in `text`: first cell → second cell.
std::map<std::string, std::string> table_rows(const std::string& text, const std::string& header) {
    std::map<std::string, std::string> rows;
    const size_t start = text.find(header);
    if (start == std::string::npos) return rows;
    std::istringstream lines(text.substr(start));
    std::string line;
    std::getline(lines, line);  // header
    std::getline(lines, line);  // |---|
    while (std::getline(lines, line) && !line.empty() && line[0] == '|') {
        const size_t a = line.find(" | ", 1), b = line.find(" |", a + 3);
        auto trim = [](std::string x) {
            x.erase(0, x.find_first_not_of(' '));
            return x.substr(0, x.find_last_not_of(' ') + 1);
        };
        rows[trim(line.substr(1, a - 1))] = trim(line.substr(a + 3, b - a - 3));
    }
    return rows;
}

// "core, ops, include/pldr (why)" or "`pldr/error.hpp` (why)" → {"core", "ops", "pldr"}: what a
// folder may include, in check_layers.sh's words.
std::set<std::string> may_include(std::string cell) {
    std::string plain;
    int depth = 0;
    for (char c : cell) {  // without the parentheses and the backticks
        depth += c == '(';
        if (!depth && c != '`') plain += c;
        depth -= c == ')' && depth > 0;
    }
    std::set<std::string> out;
    std::istringstream items(plain);
    std::string item;
    while (std::getline(items, item, ',')) {
        std::istringstream words(item);
        std::string w;
        words >> w;
        if (w == "include/pldr") w = "pldr";
        if (!w.empty()) out.insert(w);
    }
    return out;
}

TEST(DocsTree, LayerMatrixIsTheChecked) {
    const auto doc = table_rows(slurp(kRoot + "/docs/architecture.md"), "| folder | may include |");
    ASSERT_GE(doc.size(), 11u) << "layer matrix not found in docs/architecture.md";
    // check_layers.sh's matrix: lines `  [folder]="a b c"`.
    std::map<std::string, std::set<std::string>> script;
    const std::regex row(R"(^\s*\[(\w+)\]=\"([^\"]*)\")");
    std::istringstream lines(slurp(kRoot + "/tests/check_layers.sh"));
    std::string line;
    std::smatch m;
    while (std::getline(lines, line))
        if (std::regex_search(line, m, row)) {
            std::istringstream words(m[2].str());
            std::string w;
            while (words >> w) script[m[1]].insert(w);
        }
    ASSERT_GE(script.size(), 11u) << "no matrix found in tests/check_layers.sh";
    for (const auto& [folder, allowed] : script) {
        ASSERT_TRUE(doc.count(folder)) << folder << " has no row in the layer matrix of the docs";
        EXPECT_EQ(may_include(doc.at(folder)), allowed) << folder << ": " << doc.at(folder);
    }
    for (const auto& [folder, cell] : doc) {
        if (folder == "tools/pldr") continue;  // tests/check_cli_includes.sh's
        EXPECT_TRUE(script.count(folder)) << folder << " is in the docs, not in the script";
    }
}

TEST(DocsTree, ApiHeadersAreThePublicOnes) {
    const auto doc = table_rows(slurp(kRoot + "/docs/api.md"), "| header | what |");
    std::set<std::string> listed, present;
    for (const auto& [header, what] : doc) listed.insert(header);
    for (const auto& e : fs::directory_iterator(kRoot + "/include/pldr"))
        if (e.is_regular_file()) present.insert("`pldr/" + e.path().filename().string() + "`");
    EXPECT_EQ(listed, present) << "docs/api.md's header table and include/pldr/ differ";
}

}  // namespace
