// What the membership services (service.cc: the ring; etcd_service.cc: etcd) share: their own
// thread, running a coroutine there for a caller on another executor, waiting there for a
// change, and a view in words.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/deadline.h"
#include "base/status.h"
#include "elastic/membership.h"

namespace rt::elastic::membership {

// "generation 3 [1 2 4]".
inline std::string DescribeView(const View& view) {
  std::string s = "generation " + std::to_string(view.generation) + " [";
  for (size_t i = 0; i < view.members.size(); ++i)
    s += (i ? " " : "") + std::to_string(view.members[i].id);
  return s + "]";
}

// An awaitable that yields `value` at once.
template <typename T>
boost::asio::awaitable<T> Ready(T value) {
  co_return value;
}

template <typename T>
boost::asio::awaitable<std::optional<T>> AsOptional(boost::asio::awaitable<T> work) {
  co_return co_await std::move(work);
}

// Runs `work` on the service's thread (`io`) and resumes the caller on its own executor.
template <typename T>
boost::asio::awaitable<T> RunOn(boost::asio::io_context& io, boost::asio::awaitable<T> work) {
  // co_spawn needs a default-constructible result, which Result<T> is not.
  std::optional<T> result =
      co_await boost::asio::co_spawn(io, AsOptional(std::move(work)), boost::asio::use_awaitable);
  co_return std::move(*result);
}

// A service's own thread: an io_context that serves nothing else. Declare it before every member
// that holds its sockets and timers, so that it is destroyed after them.
class ServiceThread {
 public:
  ServiceThread() = default;
  ServiceThread(const ServiceThread&) = delete;
  ServiceThread& operator=(const ServiceThread&) = delete;
  ~ServiceThread() { Join(); }

  boost::asio::io_context& io() { return io_; }
  // Starts the thread running io().
  void Start() {
    finished_ = finished_promise_.get_future();
    thread_ = std::thread([this] {
      io_.run();
      finished_promise_.set_value();
    });
  }
  bool started() const { return thread_.joinable(); }
  // Runs `work` on the thread and waits for it until `deadline`; false when it did not run in
  // time. Call only from another thread, after Start().
  bool RunAndWait(std::function<void()> work, Deadline deadline) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> ran = done->get_future();
    boost::asio::post(io_, [work = std::move(work), done] {
      work();
      done->set_value();
    });
    return ran.wait_until(deadline.when()) != std::future_status::timeout;
  }
  // Lets the thread end once its work has run out (calls in flight end at their deadlines),
  // stops the io_context after 5 s at the most, and joins the thread.
  void Join() {
    if (!thread_.joinable()) return;
    work_.reset();
    if (finished_.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) io_.stop();
    thread_.join();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::promise<void> finished_promise_;
  std::future<void> finished_;
  std::thread thread_;
};

// Coroutines on a service's thread that wait for something to change there (a view, a state, a
// result). Used on that thread only.
class ChangeWaiters {
 public:
  // Returns when Wake() is called or `deadline` passes, whichever is first.
  boost::asio::awaitable<void> Wait(boost::asio::io_context& io, Deadline deadline) {
    boost::asio::steady_timer timer(io, deadline.when());
    timers_.insert(&timer);
    co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    timers_.erase(&timer);
  }
  // Wakes every waiting coroutine.
  void Wake() {
    for (boost::asio::steady_timer* timer : timers_) timer->cancel();
  }

 private:
  std::set<boost::asio::steady_timer*> timers_;
};

// What every membership backend shares around its protocol: its thread, on which every call
// runs (once shut down, calls fail with Aborted without running), and the view and state it
// publishes to other threads.
class ServiceBase : public MembershipService {
 public:
  View CurrentView() const override {
    std::lock_guard lock(mu_);
    return view_;
  }
  ReplicatedState CurrentState() const override {
    std::lock_guard lock(mu_);
    return state_;
  }

 protected:
  // Runs `work` on the service's thread and resumes the caller on its own executor, or fails
  // with Aborted once the service is shut down.
  template <typename T>
  boost::asio::awaitable<T> Call(boost::asio::awaitable<T> work) {
    if (shut_down_) return Ready<T>(T(Aborted("membership service is shut down")));
    return RunOn(thread_.io(), std::move(work));
  }
  // Sets what CurrentView and CurrentState return. On the service's thread only.
  void Publish(const View& view, const ReplicatedState& state) {
    std::lock_guard lock(mu_);
    view_ = view;
    state_ = state;
  }

  // Declared first: destroyed last, after the subclass's sockets and timers. A subclass joins
  // it (thread_.Join()) first thing in its destructor.
  ServiceThread thread_;
  std::atomic<bool> shut_down_{false};
  // Written by Publish; read without the lock on the service's thread.
  View view_;
  ReplicatedState state_;

 private:
  mutable std::mutex mu_;
};

}  // namespace rt::elastic::membership
