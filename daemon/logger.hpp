#pragma once
// Log lines for journald: each line starts with its syslog priority ("<6>"), which systemd turns
// into the journal's priority field (SyslogLevelPrefix= is on by default). Passed to what needs it;
// no global logger.

#include <ostream>
#include <string_view>

namespace jitterd {

class Logger {
 public:
  explicit Logger(std::ostream& out) : out_(&out) {}
  void info(std::string_view line) { write(6, line); }
  void warning(std::string_view line) { write(4, line); }
  void error(std::string_view line) { write(3, line); }

 private:
  void write(int priority, std::string_view line) {
    *out_ << '<' << priority << '>' << line << '\n' << std::flush;
  }
  std::ostream* out_;
};

}  // namespace jitterd
