// docs/commands.md against the program: every option a subcommand's --help
// lists is named in the page's section for that subcommand, and every option
// the page names for a subcommand is one its --help lists, so the two cannot
// drift apart.
//
// Options are tokens `--name` and `-X` (one letter) that stand alone: a link
// anchor such as `#data-parallel-replicas--d` is no option. The section headed
// "## `pipescope NAME`" belongs to subcommand NAME; the options in a code span
// or code-block command that reads `pipescope OTHER ...` belong to OTHER
// (`pipescope plan -o` in simulate's section). Sections of no subcommand
// (exit status, scenario options) may name options of any subcommand; the
// `pipescope-gui` section is another program's and is left out.

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
using Options = std::set<std::string>;

// What the page names for one subcommand.
struct DocOptions {
  Options section;    // in its own section
  Options elsewhere;  // in `pipescope NAME ...` commands of other sections
};

struct CommandsDoc {
  std::set<std::string> sections;             // subcommands with a section
  std::map<std::string, DocOptions> options;  // by subcommand
  Options general;                            // in sections of no subcommand
};

struct Drift {
  std::vector<std::string> undocumented;  // in --help, not in the section
  std::vector<std::string> unknown;       // named by the page, not in --help
};

// The lines of `text` from the one after `heading` up to the next line that
// is not indented (the next heading of CLI11's help, or its footer).
std::vector<std::string> help_block(const std::string& text, const std::string& heading) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (inside && !line.empty() && line[0] != ' ') break;
    if (inside) out.push_back(line);
    if (line == heading) inside = true;
  }
  return out;
}

// The names of the options --help lists: in its "Options:" block each
// option's line starts with two spaces and its comma-separated names
// ("  -K,--stages INT:POSITIVE  ..."); descriptions are indented further.
Options help_options(const std::string& help) {
  static const std::regex kLine("^  (-[^ ]+)");
  Options out;
  for (const std::string& line : help_block(help, "Options:")) {
    std::smatch m;
    if (!std::regex_search(line, m, kLine)) continue;
    std::istringstream names(m[1].str());
    for (std::string name; std::getline(names, name, ',');) out.insert(name);
  }
  return out;
}

// The subcommands `pipescope --help` lists.
std::vector<std::string> help_subcommands(const std::string& help) {
  static const std::regex kLine("^  ([a-z][a-z0-9-]*) ");
  std::vector<std::string> out;
  for (const std::string& line : help_block(help, "Subcommands:")) {
    std::smatch m;
    if (std::regex_search(line, m, kLine)) out.push_back(m[1].str());
  }
  return out;
}

// Every option token in `text`.
Options option_tokens(const std::string& text) {
  static const std::regex kToken(
      "(^|[^A-Za-z0-9_-])(--[a-z0-9](?:[a-z0-9-]*[a-z0-9])?|-[A-Za-z])(?![A-Za-z0-9_-])");
  Options out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kToken);
       it != std::sregex_iterator(); ++it) {
    out.insert((*it)[2].str());
  }
  return out;
}

// One section of the page while it is read: whose it is, and where its text goes.
struct SectionReader {
  CommandsDoc& doc;
  std::string command;   // empty: a section of no subcommand
  bool skipped = false;  // another program's section

  void add(const std::string& owner, const std::string& text) {
    if (skipped) return;
    const Options found = option_tokens(text);
    if (owner.empty()) {
      doc.general.insert(found.begin(), found.end());
    } else {
      Options& to = owner == command ? doc.options[owner].section : doc.options[owner].elsewhere;
      to.insert(found.begin(), found.end());
    }
  }
  // A code span or a code block's command: what follows `pipescope NAME` is NAME's.
  void add_code(const std::string& code) {
    static const std::regex kCommand("pipescope\\s+([a-z][a-z0-9-]*)");
    std::smatch m;
    if (!std::regex_search(code, m, kCommand)) return add(command, code);
    add(command, m.prefix().str());
    add(m[1].str(), m.suffix().str());
  }
  // Prose with its code spans, which may run over lines.
  void add_prose(const std::string& prose) {
    static const std::regex kSpan("`[^`]*`");
    std::string outside;
    auto last = prose.cbegin();
    for (auto it = std::sregex_iterator(prose.begin(), prose.end(), kSpan);
         it != std::sregex_iterator(); ++it) {
      outside.append(last, (*it)[0].first).push_back(' ');
      add_code((*it)[0].str());
      last = (*it)[0].second;
    }
    outside.append(last, prose.cend());
    add(command, outside);
  }
};

// Reads the page: sections by `## ` headings; in a code block, a line that is
// not indented starts a command and the indented lines after it continue it.
CommandsDoc parse_commands_doc(const std::string& markdown) {
  static const std::regex kCommandHeading("^## `pipescope ([a-z][a-z0-9-]*)`");
  CommandsDoc doc;
  SectionReader section{doc, "", false};
  std::string prose;
  std::string code;
  bool in_block = false;
  std::istringstream in(markdown);
  for (std::string line; std::getline(in, line);) {
    const bool fence = line.rfind("```", 0) == 0;
    const bool continues = in_block && !line.empty() && line[0] == ' ';
    if (in_block && !continues) section.add_code(std::exchange(code, ""));
    if (fence) {
      in_block = !in_block;
    } else if (in_block) {
      code += line + "\n";
    } else if (line.rfind("## ", 0) == 0) {
      section.add_prose(std::exchange(prose, ""));
      std::smatch m;
      const bool is_command = std::regex_search(line, m, kCommandHeading);
      section.command = is_command ? m[1].str() : "";
      section.skipped = !is_command && line.rfind("## `pipescope-", 0) == 0;
      if (is_command) doc.sections.insert(section.command);
    } else {
      prose += line + "\n";
    }
  }
  section.add_prose(prose);
  return doc;
}

std::vector<std::string> minus(const Options& a, const Options& b) {
  std::vector<std::string> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// -h and --help are every command's and go without saying.
Drift option_drift(Options help, const DocOptions& doc) {
  help.erase("-h");
  help.erase("--help");
  Options named = doc.section;
  named.insert(doc.elsewhere.begin(), doc.elsewhere.end());
  named.erase("-h");
  named.erase("--help");
  return {minus(help, doc.section), minus(named, help)};
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

// Options of other programs that the page names (Megatron-LM's, in export's section).
const Options kOtherProgramsOptions = {"--num-virtual-stages-per-pipeline-rank",
                                       "--recompute-granularity",
                                       "--recompute-method",
                                       "--recompute-num-layers",
                                       "--no-overlap-p2p-communication",
                                       "--overlap-p2p-communication-warmup-flush"};

TEST(CommandsDoc, ReadsOptionsFromHelp) {
  const std::string help =
      "Usage: pipescope demo [OPTIONS] plan\n\nPositionals:\n  plan TEXT  A plan\n\n"
      "Options:\n  -h,--help   Print this help\n  -K,--stages INT:POSITIVE\n"
      "                 Stages; see --bogus\n  --json      Print JSON, not -X\n\n"
      "A footer naming --footer\n  --indented-footer\n";
  EXPECT_EQ(help_options(help), (Options{"-h", "--help", "-K", "--stages", "--json"}));
  EXPECT_EQ(help_subcommands("Subcommands:\n  simulate    Simulate\n  plan   Plan\n\nmore\n"),
            (std::vector<std::string>{"simulate", "plan"}));
}

TEST(CommandsDoc, ReadsOptionsBySection) {
  const std::string doc =
      "# Commands\n\n`pipescope --version` and `-V`\n\n## `pipescope demo`\n\n```\n"
      "pipescope demo PLAN [-K N] [--trace FILE]\n                 [--json]\n"
      "pipescope other [--fast]\n```\n\n`-K, --stages N` as [here](x.md#replicas--d); "
      "`pipescope other\n-o` too,\nx-y and e-4 and --no-\n\n"
      "## `pipescope-gui`\n\n`--screenshot`\n\n## Notes\n\n--json\n";
  const CommandsDoc d = parse_commands_doc(doc);
  EXPECT_EQ(d.sections, (std::set<std::string>{"demo"}));
  EXPECT_EQ(d.options.at("demo").section, (Options{"-K", "--stages", "--trace", "--json"}));
  EXPECT_TRUE(d.options.at("demo").elsewhere.empty());
  EXPECT_EQ(d.options.at("other").elsewhere, (Options{"--fast", "-o"}));
  EXPECT_EQ(d.general, (Options{"--version", "-V", "--json"}));
}

// The comparison finds drift either way: an option --help has and the section
// lacks, and one the page names that --help does not have.
TEST(CommandsDoc, ComparisonFindsDriftBothWays) {
  const std::string help =
      "Options:\n  -h,--help   Print this help\n  -K,--stages INT   Stages\n"
      "  --json      Print JSON\n";
  const std::string doc =
      "## `pipescope demo`\n\n```\npipescope demo [-K N] [--trace FILE] [--json]\n```\n";
  const Drift drift = option_drift(help_options(help), parse_commands_doc(doc).options["demo"]);
  EXPECT_EQ(drift.undocumented, (std::vector<std::string>{"--stages"}));
  EXPECT_EQ(drift.unknown, (std::vector<std::string>{"--trace"}));

  const std::string fixed = "## `pipescope demo`\n\n`-K, --stages N` and `--json`.\n";
  const Drift none = option_drift(help_options(help), parse_commands_doc(fixed).options["demo"]);
  EXPECT_TRUE(none.undocumented.empty()) << joined(none.undocumented);
  EXPECT_TRUE(none.unknown.empty()) << joined(none.unknown);
}

TEST(CommandsDoc, AgreesWithEveryCommandsHelp) {
  const CliResult top = run("--help");
  ASSERT_EQ(top.status, 0) << top.err;
  const std::vector<std::string> commands = help_subcommands(top.out);
  ASSERT_GE(commands.size(), 10u) << top.out;
  CommandsDoc doc =
      parse_commands_doc(slurp(std::string(PIPESCOPE_SOURCE_DIR) + "/docs/commands.md"));
  EXPECT_EQ(doc.sections, std::set<std::string>(commands.begin(), commands.end()))
      << "docs/commands.md needs one section `## `pipescope NAME`` per subcommand";

  Options every = help_options(top.out);
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    const CliResult r = run(command + " --help");
    ASSERT_EQ(r.status, 0) << r.err;
    const Options help = help_options(r.out);
    ASSERT_GT(help.size(), 2u) << r.out;
    every.insert(help.begin(), help.end());
    DocOptions named = doc.options[command];
    for (const std::string& other : kOtherProgramsOptions) named.section.erase(other);
    const Drift drift = option_drift(help, named);
    EXPECT_TRUE(drift.undocumented.empty())
        << "in `pipescope " << command
        << " --help`, not in its section of docs/commands.md: " << joined(drift.undocumented);
    EXPECT_TRUE(drift.unknown.empty()) << "docs/commands.md names for `pipescope " << command
                                       << "` what its --help lacks: " << joined(drift.unknown);
  }
  for (const auto& [command, named] : doc.options) {
    EXPECT_TRUE(std::count(commands.begin(), commands.end(), command) == 1)
        << "docs/commands.md names options of `pipescope " << command << "`, no subcommand";
  }
  EXPECT_TRUE(minus(doc.general, every).empty())
      << "docs/commands.md names options no command has: " << joined(minus(doc.general, every));
}

}  // namespace
