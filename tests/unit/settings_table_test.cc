// The settings table (src/core/settings.hpp) and docs/settings.md say the same (issue 45, item 13): every
// WEFT_* variable in the doc's tables is in the table and every one in the table is in the doc, under the same
// section; a setting with a closed list of values lists in the doc exactly the spellings the table accepts;
// and the one parser refuses anything else with a message naming the variable, the value and every accepted
// spelling. (tests/python/test_settings.py sets each documented variable to a bad value in a real process.)
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "../support/errors.hpp"
#include "core/settings.hpp"
#include "weft/error.hpp"

namespace weft {
namespace {
namespace settings_table_test {

using settings::Kind;

struct DocRow {
  std::string section;  // the "## " heading above the table ("Settings" before the first)
  std::string values;   // the column that says what the variable accepts
};

// The WEFT_* name of a table row "| `WEFT_X` | ...", or "" for any other line. (No std::regex: GCC 12's
// <regex> trips -Wmaybe-uninitialized in the sanitizer builds, which fail on warnings.)
std::string row_name(const std::string& line) {
  const std::string open = "| `WEFT_";
  if (line.rfind(open, 0) != 0) return {};
  const std::size_t close = line.find('`', open.size());
  if (close == std::string::npos || line.compare(close, 3, "` |") != 0) return {};
  const std::string name = line.substr(3, close - 3);
  for (char c : name)
    if (!(std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'))
      return {};
  return name;
}

// Every row of docs/settings.md's tables whose first cell is a backticked WEFT_* name. The values column is
// the one headed "unit" or "values" (tables without one, the launcher's, give "").
std::multimap<std::string, DocRow> documented() {
  std::ifstream file(WEFT_TEST_DATA "/../../docs/settings.md");
  EXPECT_TRUE(file.good()) << "docs/settings.md";
  std::multimap<std::string, DocRow> rows;
  std::string line, section = "Settings";
  int values_column = -1;
  while (std::getline(file, line)) {
    if (line.rfind("## ", 0) == 0) section = line.substr(3);
    if (line.rfind("| variable |", 0) == 0) {
      values_column = -1;
      std::stringstream cells(line);
      std::string cell;
      for (int i = -1; std::getline(cells, cell, '|'); ++i)
        if (cell == " unit " || cell == " values ") values_column = i;
    }
    const std::string name = row_name(line);
    if (name.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream split(line);
    std::string cell;
    while (std::getline(split, cell, '|')) cells.push_back(cell);
    // cells[0] is before the first '|'.
    const std::string values = values_column >= 0 && values_column + 1 < static_cast<int>(cells.size())
                                   ? cells[values_column + 1]
                                   : "";
    rows.insert({name, {section, values}});
  }
  return rows;
}

// The backticked words of a cell.
std::set<std::string> backticked(const std::string& text) {
  std::set<std::string> out;
  for (std::size_t open = text.find('`'); open != std::string::npos;) {
    const std::size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    if (close > open + 1) out.insert(text.substr(open + 1, close - open - 1));
    open = text.find('`', close + 1);
  }
  return out;
}

TEST(SettingsTable, EveryVariableInTheDocIsInTheTableAndTheOtherWayRound) {
  const auto rows = documented();
  ASSERT_GT(rows.size(), 20u);
  std::set<std::string> in_table;
  for (const settings::Spec& s : settings::table()) {
    in_table.insert(std::string(s.variable));
    const auto [first, last] = rows.equal_range(std::string(s.variable));
    ASSERT_NE(first, last) << s.variable << " is read by weft but not in docs/settings.md's tables";
    bool in_its_section = false;
    for (auto it = first; it != last; ++it) in_its_section |= it->second.section == s.section;
    EXPECT_TRUE(in_its_section) << s.variable << " is not documented under \"" << s.section << "\"";
  }
  for (const auto& [variable, row] : rows)
    EXPECT_TRUE(in_table.count(variable)) << variable << " is documented but weft's settings table lacks it";
}

TEST(SettingsTable, AClosedListOfValuesIsTheSameInTheDocAndTheTable) {
  const auto rows = documented();
  for (const settings::Spec& s : settings::table()) {
    if (s.kind != Kind::choice) continue;
    SCOPED_TRACE(std::string(s.variable));
    const auto it = rows.find(std::string(s.variable));
    ASSERT_NE(it, rows.end());
    const std::set<std::string> accepted(s.choices.begin(), s.choices.end());
    EXPECT_EQ(backticked(it->second.values), accepted) << "docs: " << it->second.values;
  }
}

TEST(SettingsTable, TheParserRefusesAnUnknownValueNamingTheVariableAndEveryAcceptedValue) {
  for (const settings::Spec& s : settings::table()) {
    if (s.kind != Kind::choice) continue;
    SCOPED_TRACE(std::string(s.variable));
    for (const char* bad : {"bogus", "OFF2", "true", "-1"}) {
      const std::string message = testing::ErrorOf<InvalidArgument>([&] { settings::choice_of(s.setting, bad); });
      EXPECT_NE(message.find(std::string(s.variable) + "=" + bad), std::string::npos) << message;
      for (std::string_view value : s.choices)
        EXPECT_NE(message.find(std::string(value)), std::string::npos) << value << " unnamed in: " << message;
    }
    // Every accepted spelling is read as itself, with whitespace around it ignored (as around numbers).
    for (std::size_t i = 0; i < s.choices.size(); ++i) {
      EXPECT_EQ(settings::choice_of(s.setting, s.choices[i]), i);
      EXPECT_EQ(settings::choice_of(s.setting, " " + std::string(s.choices[i]) + "\n"), i);
    }
  }
}

TEST(SettingsTable, WeftFusionAcceptsItsThreeSpellingsOnly) {
  // The bug that started this (issue 45, item 13): OFF, false, bogus all left fusion on.
  EXPECT_EQ(settings::choice_of(settings::Setting::fusion, "auto"), 0u);
  EXPECT_EQ(settings::choice_of(settings::Setting::fusion, "off"), 1u);
  EXPECT_EQ(settings::choice_of(settings::Setting::fusion, "0"), 2u);
  for (const char* bad : {"OFF", "false", "bogus", "1"})
    EXPECT_NE(testing::ErrorOf<InvalidArgument>([&] { settings::choice_of(settings::Setting::fusion, bad); })
                  .find("WEFT_FUSION="),
              std::string::npos);
}

}  // namespace settings_table_test
}  // namespace
}  // namespace weft
