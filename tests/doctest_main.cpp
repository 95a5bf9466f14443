// main() of every doctest program here. doctest's own, plus one rule: a run whose filters match no
// test case fails. ctest runs build/bin/glass_tests once per test file (--source-file=*/test_X.cpp):
// without this, a renamed file or a mistyped filter would pass while testing nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

int g_cases_matched = -1;  // set at the end of a run; stays -1 for --help, --list-test-cases, ...

// A listener that only counts the test cases that passed the filters.
struct CountMatched : doctest::IReporter {
    explicit CountMatched(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats& stats) override {
        g_cases_matched = int(stats.numTestCasesPassingFilters);
    }
    void test_case_start(const doctest::TestCaseData&) override {}
    void test_case_reenter(const doctest::TestCaseData&) override {}
    void test_case_end(const doctest::CurrentTestCaseStats&) override {}
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("count_matched", 1, CountMatched);

}  // namespace

int main(int argc, char** argv) {
    doctest::Context context(argc, argv);
    const int result = context.run();
    if (context.shouldExit() || result != 0) return result;
    if (g_cases_matched == 0) {
        std::fprintf(stderr, "no test case matches the filters given\n");
        return 1;
    }
    return result;
}
