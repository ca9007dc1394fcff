#include "bench/chaos/campaign.h"

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <fmt/ranges.h>

#include "base/log.h"
#include "base/subprocess.h"
#include "base/wall_clock.h"
#include "bench/chaos/ckpt_files.h"
#include "bench/chaos/job.h"
#include "bench/chaos/observe.h"
#include "bench/chaos/replay.h"
#include "bench/chaos/signals.h"
#include "bench/chaos/store_ckpt.h"
#include "elastic/membership/local_etcd.h"

namespace rt::chaos {
namespace {

// The store path of the chaos job's checkpoints with CampaignOptions::store.
constexpr const char* kStorePath = "chaos";

// The faults that watch or damage checkpoint files in a folder.
bool IsCheckpointFileFault(FaultKind kind) {
  return kind == FaultKind::kKillDuringShardWrite || kind == FaultKind::kKillDuringManifest ||
         kind == FaultKind::kDiskFull || kind == FaultKind::kFlipByte;
}

namespace fs = std::filesystem;
using std::chrono::milliseconds;

void SleepMs(int64_t ms) { std::this_thread::sleep_for(milliseconds(ms)); }

// Mounts a tmpfs of `mib` MiB on `dir` for as long as it lives (root only); with `keep`, its
// contents are copied to `dir`.kept before it is unmounted (the campaign's final checkpoints).
class TmpfsMount {
 public:
  TmpfsMount(const std::string& dir, int64_t mib, bool keep) : dir_(dir), keep_(keep) {
    const std::string data = "size=" + std::to_string(mib) + "m";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, data.c_str()) == 0) {
      mounted_ = true;
      cleanup_ = AddSignalCleanup([d = dir_] { ::umount2(d.c_str(), MNT_DETACH); });
    } else {
      why_not_ = "mount -t tmpfs on " + dir + ": " + std::strerror(errno) +
                 (::geteuid() == 0 ? "" : " (needs root)");
    }
  }
  ~TmpfsMount() {
    RemoveSignalCleanup(cleanup_);
    if (mounted_ && keep_) {
      std::error_code ec;
      fs::copy(dir_, dir_ + ".kept", fs::copy_options::recursive, ec);
      if (ec) LOG_WARN("chaos: keep a copy of {}: {}", dir_, ec.message());
    }
    if (mounted_ && ::umount2(dir_.c_str(), MNT_DETACH) != 0)
      LOG_WARN("chaos: umount {}: {}", dir_, std::strerror(errno));
  }
  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }

 private:
  std::string dir_;
  bool keep_;
  bool mounted_ = false;
  std::string why_not_;
  int cleanup_ = 0;  // its signal cleanup (bench/chaos/signals.h)
};

// Registers a signal cleanup (bench/chaos/signals.h) for as long as it lives.
class ScopedSignalCleanup {
 public:
  explicit ScopedSignalCleanup(std::function<void()> cleanup)
      : id_(AddSignalCleanup(std::move(cleanup))) {}
  ~ScopedSignalCleanup() { RemoveSignalCleanup(id_); }

 private:
  int id_;
};

class Campaign {
 public:
  // `kinds`: the faults to draw from (o.kinds less those this machine cannot inject);
  // `network`: the node network (null without: no partitions).
  Campaign(const CampaignOptions& o, std::vector<FaultKind> kinds, LocalCluster& cluster,
           NodeNetwork* network, std::string ckpt_dir)
      : o_(o),
        cluster_(cluster),
        network_(network),
        ckpt_dir_(std::move(ckpt_dir)),
        schedule_(o.seed, std::move(kinds)),
        observer_(cluster, o.hang_limit_ms) {}

  // Injects faults until the job finishes (or max_faults); fills `r`.
  void Run(CampaignResult& r) {
    r_ = &r;
    start_ = MonoClock::now();
    const Deadline give_up = Deadline::After(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(o_.work_seconds * 6 + 300)));
    while (!give_up.Expired()) {
      RestartUnexpectedExits();
      Result<Json> healthy =
          observer_.WaitHealthy(o_.cluster.nodes, Deadline::AfterMs(o_.hang_limit_ms));
      if (healthy.ok() && observer_.Finished(*healthy)) break;
      if (o_.max_faults > 0 && static_cast<int>(r.faults.size()) >= o_.max_faults) {
        if (!healthy.ok()) RestartMissing();
        if (observer_.WaitFinished(Deadline::AfterMs(o_.hang_limit_ms)).ok()) break;
        continue;
      }
      if (!healthy.ok()) {
        LOG_WARN("chaos: cluster not healthy before the next fault: {}",
                 healthy.status().ToString());
        RestartMissing();
        continue;
      }
      SleepMs(schedule_.Between(o_.pause_min_ms, o_.pause_max_ms));
      Result<Json> s = cluster_.ClusterStatus(Deadline::AfterMs(10'000));
      if (!s.ok() || observer_.Finished(*s)) continue;
      Inject(schedule_.Next(), *s);
    }
    RestartMissing();
  }

 private:
  double Since(MonoTime t) const {
    return std::chrono::duration<double>(MonoClock::now() - t).count();
  }

  void RestartUnexpectedExits() {
    for (int id : cluster_.TakeUnexpectedExits()) {
      ++r_->unexpected_exits;
      LOG_WARN("chaos: daemon {} exited without being killed; restarting it", id);
      Status s = cluster_.Start(id);
      if (!s.ok()) LOG_WARN("chaos: restart daemon {}: {}", id, s.ToString());
    }
  }
  void RestartMissing() {
    for (int id = 1; id <= o_.cluster.nodes; ++id)
      if (!cluster_.Running(id)) {
        Status s = cluster_.Start(id);
        if (!s.ok()) LOG_WARN("chaos: restart daemon {}: {}", id, s.ToString());
      }
  }

  // Waits for training to go on after a fault (in a new generation when `new_generation`),
  // timing it from `from`; records the generation, the time or a hang.
  void AwaitRecovery(FaultRecord& f, MonoTime from, bool new_generation) {
    Result<Json> s = observer_.WaitProgress(f.gen_before, f.step_before, new_generation,
                                            Deadline::After(milliseconds(o_.hang_limit_ms)));
    if (!s.ok()) {
      f.hang = true;
      f.note += (f.note.empty() ? "" : "; ") + s.status().ToString();
      return;
    }
    f.gen_after = Observer::Generation(*s);
    // Training went on when rank 0 reported the first step of the generation after the fault
    // (or, in the same generation, the step seen), not when this poll of the status saw it:
    // status calls fan out to every member and took ~0.5-0.8 s during recoveries.
    const int64_t went_on =
        f.gen_after != f.gen_before ? Observer::FirstStepUnixMs(*s) : Observer::ProgressUnixMs(*s);
    const double polled = Since(from);
    const double at = polled - static_cast<double>(UnixMs() - went_on) / 1000.0;
    f.recovery_s = went_on > 0 && !Observer::Finished(*s) && at >= 0 && at <= polled ? at : polled;
  }

  // Kills daemons `ids` and restarts them; times the recovery and the rejoin.
  void KillDaemons(FaultRecord& f, const std::vector<int>& ids) {
    const MonoTime at = MonoClock::now();
    for (int id : ids) {
      Status s = cluster_.Kill(id);
      if (!s.ok()) f.note += "kill: " + s.ToString();
      last_killed_ = id;
    }
    const int alive = o_.cluster.nodes - static_cast<int>(ids.size());
    if (2 * alive > o_.cluster.nodes) {
      AwaitRecovery(f, at, true);
    } else {
      f.note += "survivors are no majority: recovery waits for the restart; ";
    }
    SleepMs(o_.restart_delay_ms);
    const MonoTime restarted = MonoClock::now();
    for (int id : ids) {
      Status s = cluster_.Start(id);
      if (!s.ok()) f.note += "restart: " + s.ToString();
    }
    if (2 * alive <= o_.cluster.nodes) AwaitRecovery(f, at, true);
    Result<Json> full =
        observer_.WaitHealthy(o_.cluster.nodes, Deadline::After(milliseconds(o_.hang_limit_ms)));
    if (full.ok()) f.rejoin_s = Since(restarted);
  }

  // kill -9 of the worker of `rank` (or a random one when rank < 0).
  void KillWorker(FaultRecord& f, const Json& s, int rank) {
    std::vector<WorkerInfo> workers = Observer::Workers(s);
    if (workers.empty()) {
      f.skipped = "no worker runs";
      return;
    }
    WorkerInfo w = workers[schedule_.Pick(workers.size())];
    for (const WorkerInfo& x : workers)
      if (x.rank == rank) w = x;
    f.target += "worker rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) + ")";
    const MonoTime at = MonoClock::now();
    if (::kill(w.pid, SIGKILL) != 0) {
      f.skipped = "kill " + std::to_string(w.pid) + ": " + std::strerror(errno);
      return;
    }
    AwaitRecovery(f, at, true);
  }

  // The member whose own proposal installed the current view (status `led_view`); else the
  // newest leader still alive, else the ring predecessor of the daemon killed last (the member
  // that watched it). Says in `f.note` which.
  int Leader(const Json& s, const std::vector<int>& members, FaultRecord& f) {
    const int64_t view = s.contains("view") ? s["view"].value("generation", int64_t{0}) : 0;
    int leader = 0;
    int64_t led = 0;
    for (const Json& n : s.value("nodes", Json::array()))
      if (n.value("led_view", int64_t{0}) > led) {
        led = n.value("led_view", int64_t{0});
        leader = n.value("node", 0);
      }
    if (leader != 0) {
      if (led != view)
        f.note += "led view " + std::to_string(led) + ", not the current " + std::to_string(view) +
                  " (its leader restarted since); ";
      return leader;
    }
    int id = members.back();
    for (int m : members)
      if (m < last_killed_) id = m;
    f.note += "no member reports led_view: the ring predecessor of the last killed; ";
    return id;
  }

  // Polls the own report of every daemon in `side` (cut off from a majority) until `until`:
  // counts in `f` a daemon that trains on, i.e. reports a step of a generation newer than
  // `generation` (the one training at the split), or more than one step in that generation
  // past the first step it reported after the split (a step in flight may finish). `max_step`
  // grows to the newest step seen.
  void WatchCutOff(FaultRecord& f, const std::vector<int>& side, const std::string& generation,
                   MonoTime until, int64_t& max_step) {
    std::set<int> trained;
    std::map<int, int64_t> first_step;
    do {
      for (int id : side) {
        if (trained.contains(id)) continue;
        Result<Json> local =
            cluster_.Call(id, daemon::kCtlLocal, Json::object(), Deadline::AfterMs(1000));
        if (!local.ok() || !local->contains("progress")) continue;
        const std::string g = Observer::Generation(*local);
        const int64_t step = Observer::Step(*local);
        max_step = std::max(max_step, step);
        const bool newer = GenerationOrder(g) > GenerationOrder(generation);
        if (!newer && g != generation) continue;
        if (!newer && !first_step.contains(id)) first_step[id] = step;
        if (newer || step > first_step[id] + 1) {
          trained.insert(id);
          ++f.minority_trained;
          f.note += fmt::format(
              "daemon {} cut off from a majority trained on: generation {} "
              "step {}; ",
              id, g, step);
        }
      }
      SleepMs(200);
    } while (MonoClock::now() < until);
  }

  // Splits the nodes, holds the split, heals it. With a majority on one side, that side must
  // install a view without the other and train on (timed from the split); without one (2|2) no
  // side may train and training goes on after the heal (timed from the heal). partition-flap
  // splits and heals a few times within seconds before that. In every case the cut-off side
  // must not train while cut off, and the whole cluster trains again after the heal (rejoin,
  // timed from the heal).
  void Partition(FaultRecord& f, FaultKind kind, std::vector<int> nodes) {
    if (network_ == nullptr) {
      f.skipped = r_->partitions_off;
      return;
    }
    const int n = static_cast<int>(nodes.size());
    const bool one = kind == FaultKind::kPartitionOne ||
                     (kind == FaultKind::kPartitionFlap && schedule_.Pick(2) == 0);
    std::vector<int> small;
    for (int k = one ? 1 : n / 2; k > 0; --k) {
      const int id = nodes[schedule_.Pick(nodes.size())];
      small.push_back(id);
      std::erase(nodes, id);
    }
    std::sort(small.begin(), small.end());
    const std::vector<int>& large = nodes;
    const bool majority = 2 * static_cast<int>(large.size()) > o_.cluster.nodes;
    // The daemons that must not train while split: the small side, or both without a majority.
    std::vector<int> cut_off = small;
    if (!majority) cut_off.insert(cut_off.end(), large.begin(), large.end());
    f.target = fmt::format("{} | {}", fmt::join(small, ","), fmt::join(large, ","));
    int64_t max_step = f.step_before;
    std::string generation = f.gen_before;  // training at the split
    auto split = [&]() {
      Status s = network_->Split(small, large);
      if (!s.ok()) f.note += s.ToString() + "; ";
      if (majority) cluster_.SetCutOff({small.begin(), small.end()});
    };
    auto heal = [&]() {
      Status s = network_->Heal();
      if (!s.ok()) f.note += s.ToString() + "; ";
      cluster_.SetCutOff({});
    };
    if (kind == FaultKind::kPartitionFlap) {
      f.target += fmt::format(", {} times", o_.partition_flaps);
      for (int i = 0; i < o_.partition_flaps; ++i) {
        // A heal may have let a new generation start, with the cut-off daemons in it.
        // (The newest one a member runs: it has no progress yet if it started during the heal.)
        if (Result<Json> now = cluster_.ClusterStatus(Deadline::AfterMs(2000)); now.ok())
          if (const std::string g = Observer::NewestGeneration(*now);
              GenerationOrder(g) > GenerationOrder(generation))
            generation = g;
        split();
        WatchCutOff(
            f, cut_off, generation,
            MonoClock::now() + milliseconds(schedule_.Between(o_.flap_min_ms, o_.flap_max_ms)),
            max_step);
        heal();
        SleepMs(schedule_.Between(o_.flap_min_ms, o_.flap_max_ms));
      }
    } else {
      const int64_t hold = schedule_.Between(o_.partition_min_ms, o_.partition_max_ms);
      f.target += fmt::format(" for {} ms", hold);
      const MonoTime at = MonoClock::now();
      split();
      if (majority) AwaitRecovery(f, at, true);
      WatchCutOff(f, cut_off, generation, at + milliseconds(hold), max_step);
      heal();
    }
    const MonoTime healed = MonoClock::now();
    if (kind == FaultKind::kPartitionFlap || !majority) {
      // Training goes on after the heal, in any generation: timed from the heal, past the
      // generation and step seen at the heal.
      if (Result<Json> now = cluster_.ClusterStatus(Deadline::AfterMs(2000)); now.ok()) {
        if (Observer::Generation(*now) != generation) max_step = 0;
        generation = Observer::Generation(*now);
        max_step = std::max(max_step, Observer::Step(*now));
      }
      Result<Json> s = observer_.WaitProgress(generation, max_step, false,
                                              Deadline::After(milliseconds(o_.hang_limit_ms)));
      if (!s.ok()) {
        f.hang = true;
        f.note += s.status().ToString() + "; ";
      } else {
        f.recovery_s = Since(healed);
        f.gen_after = Observer::Generation(*s);
      }
    }
    Result<Json> full =
        observer_.WaitHealthy(o_.cluster.nodes, Deadline::After(milliseconds(o_.hang_limit_ms)));
    if (full.ok()) {
      f.rejoin_s = Since(healed);
    } else {
      f.note += "the cut-off daemons did not rejoin: " + full.status().ToString() + "; ";
    }
  }

  // The newest committed step not corrupted by the campaign (-1: none), in the folder or the
  // store.
  int64_t NewestCommitted() {
    if (!o_.store) return NewestIntact(ckpt_dir_, r_->corrupted);
    const std::vector<int64_t> steps = CommittedStepsInStore(cluster_, kStorePath);
    if (steps.empty()) return -1;  // no daemon answered, or nothing is committed yet
    if (steps.front() < newest_committed_seen_) {
      const std::string what = fmt::format(
          "at {:.1f} s the store's newest committed checkpoint went back from step {} to {}",
          Since(start_), newest_committed_seen_, steps.front());
      LOG_ERROR("chaos: {}", what);
      r_->committed_regressions.push_back(what);
    }
    newest_committed_seen_ = std::max(newest_committed_seen_, steps.front());
    return steps.front();
  }

  void Inject(FaultKind kind, const Json& s) {
    FaultRecord f;
    f.kind = kind;
    f.at_s = Since(start_);
    f.gen_before = Observer::Generation(s);
    f.step_before = Observer::Step(s);
    f.committed_before = NewestCommitted();
    const std::vector<int> members = Observer::MemberIds(s);
    switch (kind) {
      case FaultKind::kKillWorker:
        KillWorker(f, s, -1);
        break;
      case FaultKind::kKillDaemon:
      case FaultKind::kKillLeader: {
        int id = members[schedule_.Pick(members.size())];
        if (kind == FaultKind::kKillLeader) id = Leader(s, members, f);
        f.target = "daemon " + std::to_string(id);
        KillDaemons(f, {id});
        break;
      }
      case FaultKind::kKillTwoDaemons: {
        std::vector<int> pool = members;
        const int a = pool[schedule_.Pick(pool.size())];
        std::erase(pool, a);
        const int b = pool[schedule_.Pick(pool.size())];
        f.target = "daemons " + std::to_string(a) + " and " + std::to_string(b);
        KillDaemons(f, {a, b});
        break;
      }
      case FaultKind::kStopDaemon: {
        const int id = members[schedule_.Pick(members.size())];
        const int64_t hang = schedule_.Between(o_.hang_min_ms, o_.hang_max_ms);
        f.target = "daemon " + std::to_string(id) + " for " + std::to_string(hang) + " ms";
        const MonoTime at = MonoClock::now();
        Status st = cluster_.Pause(id, true);
        SleepMs(hang);
        if (st.ok()) st = cluster_.Pause(id, false);
        if (!st.ok()) f.note += st.ToString();
        AwaitRecovery(f, at, false);
        break;
      }
      case FaultKind::kStopWorker: {
        std::vector<WorkerInfo> workers = Observer::Workers(s);
        if (workers.empty()) {
          f.skipped = "no worker runs";
          break;
        }
        const WorkerInfo w = workers[schedule_.Pick(workers.size())];
        const int64_t hang = schedule_.Between(o_.hang_min_ms, o_.hang_max_ms);
        f.target = "worker rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) +
                   ") for " + std::to_string(hang) + " ms";
        // Timed from the SIGSTOP, as a stopped daemon is: the job stalls from then until its
        // daemon kills the silent worker (worker.hang_ms) and a new generation trains, or the
        // worker goes on after the SIGCONT.
        const MonoTime at = MonoClock::now();
        ::kill(w.pid, SIGSTOP);
        SleepMs(hang);
        ::kill(w.pid, SIGCONT);
        AwaitRecovery(f, at, false);
        break;
      }
      case FaultKind::kKillDuringShardWrite:
      case FaultKind::kKillDuringManifest: {
        const int world = static_cast<int>(Observer::Workers(s).size());
        const Deadline deadline = Deadline::AfterMs(o_.hang_limit_ms);
        std::optional<SaveWindow> w;
        while (!w && !deadline.Expired()) {
          w = kind == FaultKind::kKillDuringShardWrite ? FindShardWrite(ckpt_dir_)
                                                       : FindManifestWrite(ckpt_dir_, world);
          if (!w) SleepMs(2);
        }
        if (!w) {
          f.skipped = "no save seen in that phase within the hang limit";
          break;
        }
        f.target = "step " + std::to_string(w->step) + ": kill ";
        f.committed_before = NewestIntact(ckpt_dir_, r_->corrupted);
        KillWorker(f, s, w->rank);
        break;
      }
      case FaultKind::kDiskFull: {
        if (!r_->disk_full_off.empty()) {
          f.skipped = r_->disk_full_off;
          break;
        }
        f.target = "checkpoint tmpfs for " + std::to_string(o_.disk_full_ms) + " ms";
        Status st = FillDisk(ckpt_dir_ + "/..");
        SleepMs(o_.disk_full_ms);
        Status freed = FreeDisk(ckpt_dir_ + "/..");
        if (!st.ok() || !freed.ok()) f.note += st.ToString() + "; " + freed.ToString() + "; ";
        // Recovered when a checkpoint newer than any before the fill commits: saving works
        // again (the job may have restarted meanwhile; the note says so).
        const MonoTime freed_at = MonoClock::now();
        const int64_t before = std::max(f.committed_before, NewestIntact(ckpt_dir_, r_->corrupted));
        const Deadline deadline = Deadline::AfterMs(o_.hang_limit_ms);
        while (NewestIntact(ckpt_dir_, r_->corrupted) <= before && !deadline.Expired()) SleepMs(50);
        if (NewestIntact(ckpt_dir_, r_->corrupted) <= before) {
          f.hang = true;
          f.note += "no checkpoint committed after the disk was freed; ";
        } else {
          f.recovery_s = Since(freed_at);
        }
        Result<Json> now = cluster_.ClusterStatus(Deadline::AfterMs(10'000));
        if (now.ok()) f.gen_after = Observer::Generation(*now);
        if (f.gen_after != f.gen_before)
          f.note += "the job restarted (generation " + f.gen_after + "); ";
        break;
      }
      case FaultKind::kPartitionHalves:
      case FaultKind::kPartitionOne:
      case FaultKind::kPartitionFlap:
        Partition(f, kind, members);
        break;
      case FaultKind::kFlipByte: {
        const int64_t step = f.committed_before;
        if (step < 0) {
          f.skipped = "no committed checkpoint yet";
          break;
        }
        Result<std::string> flipped =
            FlipByte(ckpt_dir_, step, schedule_.Pick(1 << 20),
                     static_cast<uint64_t>(schedule_.Between(0, int64_t{1} << 40)));
        if (!flipped.ok()) {
          f.skipped = flipped.status().ToString();
          break;
        }
        r_->corrupted.insert(step);
        f.corrupted_step = step;
        f.target = *flipped + ", then kill ";
        f.committed_before = NewestIntact(ckpt_dir_, r_->corrupted);
        // Verified while the kill's recovery runs: before newer saves can retire the step.
        std::future<Result<ProcessOutcome>> verify = std::async(std::launch::async, [&] {
          return RunProcess({o_.ringckpt, "verify", ckpt_dir_, "--step", std::to_string(step)},
                            EnvironmentWithout({"RINGTRAIN_FAULTS"}), Deadline::AfterMs(120'000));
        });
        KillWorker(f, s, -1);
        Result<ProcessOutcome> v = verify.get();
        if (v.ok() && v->exited && v->exit_code == 1) {
          ++r_->flips_detected;
          f.note += "ringckpt verify refused it; ";
        } else {
          ++r_->flips_undetected;
          f.note += "ringckpt verify did not refuse it: " +
                    (v.ok() ? v->Describe() + " " + v->output : v.status().ToString()) + "; ";
        }
        break;
      }
    }
    LOG_INFO("chaos: fault {} {}: {}{}{}", r_->faults.size() + 1, FaultName(kind), f.target,
             f.skipped.empty() ? "" : " skipped: " + f.skipped,
             f.recovery_s >= 0 ? fmt::format(" recovered in {:.2f} s", f.recovery_s)
                               : std::string(f.hang ? " HANG" : ""));
    r_->faults.push_back(std::move(f));
  }

  const CampaignOptions& o_;
  LocalCluster& cluster_;
  NodeNetwork* network_;
  std::string ckpt_dir_;
  FaultSchedule schedule_;
  Observer observer_;
  CampaignResult* r_ = nullptr;
  MonoTime start_;
  int last_killed_ = 0;
  int64_t newest_committed_seen_ = -1;  // store campaigns: the newest committed step seen so far
};

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return text;
}

// ringckpt verify of `step` through each URI `uris()` names in turn, until one can check it
// (exit 0 or 1), every second for up to 60 s while none can (exit 2: the store unreachable).
VerifiedCheckpoint VerifyCheckpoint(const CampaignOptions& o, int64_t step,
                                    const std::function<std::vector<std::string>()>& uris,
                                    const std::vector<std::string>& secret) {
  VerifiedCheckpoint v;
  v.step = step;
  const Deadline give_up = Deadline::AfterMs(60'000);
  while (true) {
    for (const std::string& uri : uris()) {
      std::vector<std::string> argv = {o.ringckpt};
      argv.insert(argv.end(), secret.begin(), secret.end());
      argv.insert(argv.end(), {"verify", uri, "--step", std::to_string(step)});
      Result<ProcessOutcome> out =
          RunProcess(argv, EnvironmentWithout({"RINGTRAIN_FAULTS"}), Deadline::AfterMs(120'000));
      v.passed = out.ok() && out->exited && out->exit_code == 0;
      v.checked = out.ok() && out->exited && (out->exit_code == 0 || out->exit_code == 1);
      v.output = v.passed ? "" : out.ok() ? out->output : out.status().ToString();
      if (v.checked) return v;
    }
    if (give_up.Expired()) return v;
    SleepMs(1000);
  }
}

// Fills the replay fields of `r`: the final checkpoint in `ckpt_dir` (read through `ckpt_uri`
// with `ringckpt_options`) against a fault-free replay of the chaos job's layout history
// (bench/chaos/replay.h).
void CompareWithReplay(const CampaignOptions& o, const std::string& ckpt_dir,
                       const std::string& ckpt_uri,
                       const std::vector<std::string>& ringckpt_options, CampaignResult& r) {
  const std::vector<TrainedGeneration> gens =
      ReadGenerations(o.cluster.dir, o.cluster.nodes, "chaos");
  Result<std::vector<HistorySegment>> history = LayoutHistory(gens, r.final_step, ckpt_dir);
  if (!history.ok()) {
    r.replay_error = history.status().ToString();
    return;
  }
  for (const HistorySegment& s : *history)
    r.replayed.push_back(fmt::format("{} {} {}..{}", s.generation, s.layout, s.from, s.to));
  LOG_INFO("chaos: replaying the layout history without faults ({} generations)", history->size());
  Result<ReplayOutcome> replay =
      ReplayHistory(*history, o.ringtrain, o.ringckpt, o.cluster.dir + "/replay", ckpt_uri,
                    r.final_step, ringckpt_options);
  if (!replay.ok()) {
    r.replay_error = replay.status().ToString();
    return;
  }
  r.final_max_abs_difference = replay->max_abs_difference;
}

}  // namespace

Result<CampaignResult> RunCampaign(const CampaignOptions& o) {
  CampaignResult r;
  r.started = UtcNow();
  r.nodes = o.cluster.nodes;
  r.seed = o.seed;
  const std::string dir = o.cluster.dir;
  std::error_code ec;
  if (fs::exists(dir) && !fs::is_empty(dir, ec))
    return FailedPrecondition("the campaign folder " + dir + " is not empty");
  fs::create_directories(dir + "/ckpt", ec);
  if (ec) return Status(StatusCode::kIoError, "create " + dir + "/ckpt: " + ec.message());
  RETURN_IF_ERROR(WriteChaosData(dir + "/data"));
  TmpfsMount tmpfs(dir + "/ckpt", o.tmpfs_mib, o.keep_checkpoints);
  if (!tmpfs.mounted()) r.disk_full_off = "not run: " + tmpfs.why_not();

  // The node network, when asked for and possible; without it no partition is drawn.
  ClusterOptions co = o.cluster;
  std::unique_ptr<NodeNetwork> network;
  std::unique_ptr<elastic::LocalEtcd> etcd;  // outlives the cluster (declared before it)
  if (o.etcd) {
    ASSIGN_OR_RETURN(etcd, elastic::LocalEtcd::Start(dir + "/etcd"));
    co.etcd = etcd->endpoint();
    r.membership = "etcd " + co.etcd;
  }
  if (o.etcd) {
    r.partitions_off = "not run: --etcd (the daemons' namespaces cannot reach etcd on loopback)";
  } else if (o.netns) {
    RemoveLeftoverNetworks();
    Result<std::unique_ptr<NodeNetwork>> made = NodeNetwork::Create(co.nodes);
    if (made.ok()) {
      network = std::move(*made);
    } else {
      r.partitions_off = "not run: " + made.status().ToString();
    }
  } else {
    r.partitions_off = "not run: --no-netns";
  }
  ScopedSignalCleanup remove_network([&network] {
    if (network) network->Remove();
  });
  co.network = network.get();
  std::vector<FaultKind> kinds = o.kinds;
  if (!r.partitions_off.empty()) {
    std::erase_if(kinds, IsPartition);
    LOG_WARN("chaos: partitions {}; the campaign runs without partition faults", r.partitions_off);
    if (kinds.empty())
      return FailedPrecondition("partitions " + r.partitions_off +
                                " and no other fault was asked for");
  }
  if (o.store) {
    co.store_replication = std::min(3, co.nodes);
    r.checkpoints = fmt::format("the daemons' embedded chunk store (ringfs:///{}, replication {})",
                                kStorePath, co.store_replication);
    r.file_faults_off = "not run: --store (they watch or damage checkpoint files in a folder)";
    std::erase_if(kinds, IsCheckpointFileFault);
    if (kinds.empty())
      return FailedPrecondition("the checkpoint-file faults are " + r.file_faults_off +
                                " and no other fault was asked for");
  }

  // The save windows exist for the kill -9 of the two checkpoint-write faults only: every other
  // campaign saves at full speed (with them, a store campaign's job waited 0.6 s per save).
  const bool save_windows = std::any_of(kinds.begin(), kinds.end(), [](FaultKind k) {
    return k == FaultKind::kKillDuringShardWrite || k == FaultKind::kKillDuringManifest;
  });
  if (save_windows)
    co.env.push_back(
        "RINGTRAIN_FAULTS=ckpt.save.after_data=delay:" + std::to_string(o.window_delay_ms) +
        ",ckpt.commit.after_fragments=delay:" + std::to_string(o.window_delay_ms));
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Create(co));
  for (int id = 1; id <= co.nodes; ++id) RETURN_IF_ERROR(cluster->Start(id));
  Observer observer(*cluster, o.hang_limit_ms);

  // The fault-free reference: steps per second of the same cluster and job.
  const std::string baseline_dir = o.store ? "ringfs:///baseline" : dir + "/ckpt/baseline";
  RETURN_IF_ERROR(
      SubmitJob(*cluster, ChaosJob("baseline", dir + "/data", baseline_dir, int64_t{1} << 40,
                                   o.ckpt_every, o.memory_every, o.memory_copies)));
  ASSIGN_OR_RETURN(r.baseline_steps_per_s,
                   observer.MeasureRate(co.nodes, o.baseline_seconds, Deadline::AfterMs(300'000)));
  RETURN_IF_ERROR(StopJob(*cluster, observer));
  if (!o.store) fs::remove_all(baseline_dir, ec);
  r.job_steps =
      o.job_steps > 0
          ? o.job_steps
          : std::max<int64_t>(2 * o.ckpt_every,
                              static_cast<int64_t>(r.baseline_steps_per_s * o.work_seconds));
  LOG_INFO("chaos: fault-free {:.2f} steps/s on {} nodes; the chaos job trains {} steps",
           r.baseline_steps_per_s, co.nodes, r.job_steps);

  const std::string ckpt_dir =
      o.store ? std::string("ringfs:///") + kStorePath : dir + "/ckpt/chaos";
  RETURN_IF_ERROR(SubmitJob(*cluster, ChaosJob("chaos", dir + "/data", ckpt_dir, r.job_steps,
                                               o.ckpt_every, o.memory_every, o.memory_copies)));
  RETURN_IF_ERROR(observer.WaitStep(1, Deadline::AfterMs(300'000)).status());
  const MonoTime chaos_start = MonoClock::now();
  Campaign campaign(o, std::move(kinds), *cluster, network.get(), ckpt_dir);
  campaign.Run(r);
  Result<Json> done = observer.WaitFinished(Deadline::AfterMs(o.hang_limit_ms));
  r.chaos_wall_s = std::chrono::duration<double>(MonoClock::now() - chaos_start).count();
  r.finished = done.ok();
  if (done.ok()) r.final_step = Observer::FinishedStep(*done);
  if (!o.store) {
    cluster.reset();  // every daemon and worker is gone before the checks read the files
    if (network) network->Remove();
  }

  r.recoveries = ReadRecoveryLines(dir, o.cluster.nodes);
  CheckCorruptResumes(r);
  // With the store the checkpoints are read through a daemon's chunk server (the cluster runs
  // until the checks are done), once every daemon is back in the view: the job may have
  // finished during the last fault, and a daemon just back from a partition refuses reads
  // until it has rejoined.
  if (o.store) {
    Result<Json> healthy =
        observer.WaitHealthy(o.cluster.nodes, Deadline::AfterMs(o.hang_limit_ms));
    if (!healthy.ok())
      LOG_WARN("chaos: the cluster is not healthy for the checks: {}", healthy.status().ToString());
  }
  const std::string ckpt_uri = o.store ? StoreUri(*cluster, kStorePath) : ckpt_dir;
  const std::vector<std::string> secret =
      o.store ? RingckptSecretOptions(*cluster) : std::vector<std::string>{};
  const std::vector<int64_t> committed =
      o.store ? CommittedStepsInStore(*cluster, kStorePath) : CommittedSteps(ckpt_dir);
  for (int64_t step : committed) {
    VerifiedCheckpoint v = VerifyCheckpoint(
        o, step,
        [&] {
          return o.store ? StoreUris(*cluster, kStorePath) : std::vector<std::string>{ckpt_dir};
        },
        secret);
    v.corrupted = r.corrupted.contains(step);
    if (!v.passed)
      LOG_WARN("chaos: ringckpt verify of step {} {}: {}", step,
               v.checked ? "refused it" : "could not check it", v.output);
    r.verified.push_back(std::move(v));
  }
  if (r.finished && !o.ringtrain.empty()) CompareWithReplay(o, ckpt_dir, ckpt_uri, secret, r);
  cluster.reset();
  if (network) network->Remove();
  return r;
}

}  // namespace rt::chaos
