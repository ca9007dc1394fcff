#include "base/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "base/subprocess.h"

namespace rt {
namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// Runs `body` as a coroutine on a fresh io_context until it completes.
template <typename T>
T RunOn(asio::io_context& io, asio::awaitable<T> body) {
  std::optional<T> result;
  auto store = [&result](asio::awaitable<T> op) -> asio::awaitable<void> {
    result.emplace(co_await std::move(op));
  };
  asio::co_spawn(io, store(std::move(body)), asio::detached);
  io.run();
  io.restart();
  return std::move(*result);
}

SpawnOptions Shell(const std::string& script) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.env = EnvironmentWithout({});
  return o;
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid())))
      .string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// True when the process `pid` (not our child) exits within `timeout`, seen through its pidfd.
bool ExitsWithin(pid_t pid, milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // already gone
  pollfd p{fd, POLLIN, 0};
  const int rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(fd);
  return rc == 1;
}

TEST(ProcessTest, ReportsTheExitStatusAndWritesOutputToTheFile) {
  asio::io_context io;
  const std::string out = TempPath("process_test_out");
  std::filesystem::remove(out);
  SpawnOptions o = Shell("echo \"out $GIVEN\"; echo err >&2; exit 3");
  o.env = {"GIVEN=yes"};
  o.stdout_path = out;
  auto child = ChildProcess::Spawn(io.get_executor(), o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ(::getpgid((*child)->pid()), (*child)->pid()) << "the child leads its own group";
  Result<ChildExit> e = RunOn(io, (*child)->Wait(Deadline::AfterMs(20'000)));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->exited);
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_EQ(e->Describe(), "exit status 3");
  EXPECT_EQ(ReadAll(out), "out yes\nerr\n");
  // A second Wait returns the same exit at once.
  Result<ChildExit> again = RunOn(io, (*child)->Wait(Deadline::AfterMs(0)));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->exit_code, 3);
  std::filesystem::remove(out);
}

// Only stdin, stdout and stderr cross the exec: a descriptor the parent holds without
// O_CLOEXEC (as Asio opens its sockets) is closed in the child, so a connection the parent
// closes is not kept open by a child that outlives it.
TEST(ProcessTest, OnlyStdioCrossesTheExec) {
  asio::io_context io;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);                            // no O_CLOEXEC
  const int inherited = ::fcntl(pipe_fds[1], F_DUPFD, 200);  // no FD_CLOEXEC either
  ASSERT_GE(inherited, 200);
  const std::string out = TempPath("process_test_fds");
  SpawnOptions o = Shell("if [ -e /proc/self/fd/" + std::to_string(inherited) +
                         " ]; then echo open; else echo closed; fi");
  o.stdout_path = out;
  auto child = ChildProcess::Spawn(io.get_executor(), o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ChildExit> e = RunOn(io, (*child)->Wait(Deadline::AfterMs(20'000)));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(ReadAll(out), "closed\n");
  // The parent's own copies stay open.
  EXPECT_EQ(::fcntl(inherited, F_GETFD), 0);
  ::close(inherited);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  std::filesystem::remove(out);
}

TEST(ProcessTest, NiceLowersTheChildsPriorityBelowTheParents) {
  asio::io_context io;
  errno = 0;
  const int parent = ::getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  const std::string out = TempPath("process_test_nice");
  std::filesystem::remove(out);
  SpawnOptions o = Shell("cut -d' ' -f19 /proc/self/stat");  // field 19: the niceness
  o.stdout_path = out;
  o.nice = 3;
  auto child = ChildProcess::Spawn(io.get_executor(), o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ChildExit> e = RunOn(io, (*child)->Wait(Deadline::AfterMs(20'000)));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(ReadAll(out), std::to_string(std::min(parent + 3, 19)) + "\n");
  EXPECT_EQ(::getpriority(PRIO_PROCESS, 0), parent);  // the parent's own stays
  std::filesystem::remove(out);
}

TEST(ProcessTest, SeparateStderrFileAndWorkingDirectory) {
  asio::io_context io;
  const std::string out = TempPath("process_test_o"), err = TempPath("process_test_e");
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  SpawnOptions o = Shell("pwd; echo oops >&2");
  o.cwd = "/tmp";
  o.stdout_path = out;
  o.stderr_path = err;
  auto child = ChildProcess::Spawn(io.get_executor(), o);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ChildExit> e = RunOn(io, (*child)->Wait(Deadline::AfterMs(20'000)));
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->ok());
  EXPECT_EQ(ReadAll(out), "/tmp\n");
  EXPECT_EQ(ReadAll(err), "oops\n");
  std::filesystem::remove(out);
  std::filesystem::remove(err);
}

// inherit_output: the child writes to whatever this process's stdout and stderr are.
TEST(ProcessTest, InheritedOutputGoesToThisProcesssStdoutAndStderr) {
  const std::string out = TempPath("process_test_io"), err = TempPath("process_test_ie");
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(out_fd, 0);
  ASSERT_GE(err_fd, 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = ::dup(STDOUT_FILENO), saved_err = ::dup(STDERR_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  SpawnOptions o = Shell("echo to-stdout; echo to-stderr >&2");
  o.stdout_path = TempPath("process_test_unused");  // ignored with inherit_output
  o.inherit_output = true;
  Result<StartedChild> child = StartChild(o);
  ::dup2(saved_out, STDOUT_FILENO);
  ::dup2(saved_err, STDERR_FILENO);
  for (int fd : {saved_out, saved_err, out_fd, err_fd}) ::close(fd);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  Result<ChildExit> e = ReapChild(child->pidfd);
  ::close(child->pidfd);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->ok()) << e->Describe();
  EXPECT_EQ(ReadAll(out), "to-stdout\n");
  EXPECT_EQ(ReadAll(err), "to-stderr\n");
  EXPECT_FALSE(std::filesystem::exists(TempPath("process_test_unused")));
  std::filesystem::remove(out);
  std::filesystem::remove(err);
}

TEST(ProcessTest, AMissingExecutableIsASpawnErrorNamingIt) {
  asio::io_context io;
  SpawnOptions o;
  o.argv = {"/nonexistent/worker", "x"};
  auto child = ChildProcess::Spawn(io.get_executor(), o);
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.status().ToString().find("/nonexistent/worker"), std::string::npos)
      << child.status().ToString();
  EXPECT_NE(child.status().ToString().find("execve"), std::string::npos);
  EXPECT_FALSE(ChildProcess::Spawn(io.get_executor(), SpawnOptions{}).ok());
}

TEST(ProcessTest, WaitHasADeadlineAndTheChildRunsOn) {
  asio::io_context io;
  auto child = ChildProcess::Spawn(io.get_executor(), Shell("exec sleep 30"));
  ASSERT_TRUE(child.ok());
  Result<ChildExit> e = RunOn(io, (*child)->Wait(Deadline::AfterMs(50)));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(::kill((*child)->pid(), 0), 0) << "still running";
  // SIGKILL now: the wait sees it without polling.
  ASSERT_TRUE((*child)->Signal(SIGKILL).ok());
  e = RunOn(io, (*child)->Wait(Deadline::AfterMs(20'000)));
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->exited);
  EXPECT_EQ(e->signal, SIGKILL);
}

TEST(ProcessTest, TerminateSendsSigtermFirst) {
  asio::io_context io;
  auto child = ChildProcess::Spawn(io.get_executor(), Shell("exec sleep 30"));
  ASSERT_TRUE(child.ok());
  Result<ChildExit> e = RunOn(io, (*child)->Terminate(milliseconds(20'000)));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->signal, SIGTERM);
}

TEST(ProcessTest, TerminateKillsAChildThatIgnoresSigtermAfterTheGrace) {
  asio::io_context io;
  const std::string ready = TempPath("process_test_ready");
  std::filesystem::remove(ready);
  // The trap is set before the marker is written, so SIGTERM cannot come before it.
  auto child = ChildProcess::Spawn(
      io.get_executor(), Shell("trap '' TERM; touch " + ready + "; while :; do sleep 1; done"));
  ASSERT_TRUE(child.ok());
  const Deadline ready_by = Deadline::AfterMs(20'000);
  while (!std::filesystem::exists(ready) && !ready_by.Expired())
    std::this_thread::sleep_for(milliseconds(10));
  ASSERT_TRUE(std::filesystem::exists(ready));
  const auto start = MonoClock::now();
  Result<ChildExit> e = RunOn(io, (*child)->Terminate(milliseconds(300)));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_GE(MonoClock::now() - start, milliseconds(300));
  std::filesystem::remove(ready);
}

TEST(ProcessTest, DestroyingTheObjectKillsTheWholeGroup) {
  asio::io_context io;
  const std::string pids = TempPath("process_test_pids");
  std::filesystem::remove(pids);
  pid_t grandchild = 0;
  {
    auto child = ChildProcess::Spawn(
        io.get_executor(),
        Shell("sleep 30 & echo $! > " + pids + ".tmp; mv " + pids + ".tmp " + pids + "; wait"));
    ASSERT_TRUE(child.ok());
    const Deadline by = Deadline::AfterMs(20'000);
    while (!std::filesystem::exists(pids) && !by.Expired())
      std::this_thread::sleep_for(milliseconds(10));
    grandchild = std::atoi(ReadAll(pids).c_str());
    ASSERT_GT(grandchild, 0);
  }
  EXPECT_TRUE(ExitsWithin(grandchild, milliseconds(20'000)));
  std::filesystem::remove(pids);
}

TEST(ProcessTest, TheChildDiesWithItsParent) {
  // An intermediate process spawns `sleep`, reports its pid and dies without any cleanup (as a
  // kill -9 would): PR_SET_PDEATHSIG must take the sleep down.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    asio::io_context io;
    SpawnOptions o;
    o.argv = {"/bin/sleep", "30"};
    auto child = ChildProcess::Spawn(io.get_executor(), o);
    const pid_t pid = child.ok() ? (*child)->pid() : -1;
    [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], &pid, sizeof(pid));
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  pid_t grandchild = -1;
  ASSERT_EQ(::read(pipe_fds[0], &grandchild, sizeof(grandchild)),
            static_cast<ssize_t>(sizeof(grandchild)));
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(middle, &status, 0), middle);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(ExitsWithin(grandchild, milliseconds(20'000)));
}

}  // namespace
}  // namespace rt
