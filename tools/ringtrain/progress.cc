#include "tools/ringtrain/progress.h"

#include <unistd.h>

#include <cstdio>

namespace rt::cli {
namespace {

std::string Duration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(t / 60),
                  static_cast<long long>(t % 60));
  }
  return buf;
}

}  // namespace

Progress::Progress(int64_t total_steps, int plain_every)
    : total_(total_steps), plain_every_(plain_every), tty_(isatty(STDOUT_FILENO) == 1) {}

void Progress::Step(int64_t step, double loss, double lr, double tokens_per_s, double elapsed_s,
                    bool skipped) {
  const double eta = step > 0 ? elapsed_s / step * static_cast<double>(total_ - step) : 0;
  if (tty_) {
    constexpr int kWidth = 24;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : kWidth;
    std::string bar(filled, '#');
    bar.append(kWidth - filled, '.');
    std::printf("\r\x1b[Kstep %lld/%lld [%s] loss %.4f lr %.2e %.0f tok/s ETA %s%s",
                static_cast<long long>(step), static_cast<long long>(total_), bar.c_str(), loss, lr,
                tokens_per_s, Duration(eta).c_str(), skipped ? " (skipped)" : "");
    std::fflush(stdout);
    bar_open_ = true;
  } else if (step % plain_every_ == 0 || step == total_ || skipped) {
    std::printf("step %lld/%lld loss %.4f lr %.3e tokens/s %.0f eta %s%s\n",
                static_cast<long long>(step), static_cast<long long>(total_), loss, lr,
                tokens_per_s, Duration(eta).c_str(),
                skipped ? " (skipped: non-finite gradients)" : "");
    std::fflush(stdout);
  }
}

void Progress::Line(const std::string& text) {
  if (bar_open_) std::printf("\r\x1b[K");
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  bar_open_ = false;
}

void Progress::Finish() {
  if (bar_open_) std::printf("\n");
  std::fflush(stdout);
  bar_open_ = false;
}

}  // namespace rt::cli
