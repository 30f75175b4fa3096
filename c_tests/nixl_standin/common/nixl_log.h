/*
 * Test stand-in for NIXL's common/nixl_log.h (same include guard and macro names): instead of
 * absl, each NIXL_<LEVEL> statement records (level, message) in standinLog::records() so a
 * test can check what reached "NIXL's logger".
 */
#ifndef __NIXL_LOG_H
#define __NIXL_LOG_H

#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

struct standinLog {
    enum level { FATAL, ERROR, WARNING, INFO, DEBUG, TRACE };

    explicit standinLog(level l) : level_(l) {}
    standinLog(const standinLog &) = delete;

    ~standinLog() {
        std::lock_guard<std::mutex> lock(mutex());
        records().emplace_back(level_, stream_.str());
    }

    template<class T>
    standinLog &
    operator<<(const T &value) {
        stream_ << value;
        return *this;
    }

    static std::vector<std::pair<level, std::string>> &
    records() {
        static std::vector<std::pair<level, std::string>> r;
        return r;
    }

    static std::mutex &
    mutex() {
        static std::mutex m;
        return m;
    }

    /** Messages of `l` containing `needle` (all of `l` for an empty needle). */
    static size_t
    count(level l, const std::string &needle = "") {
        std::lock_guard<std::mutex> lock(mutex());
        size_t n = 0;
        for (const auto &r : records()) {
            n += r.first == l && r.second.find(needle) != std::string::npos;
        }
        return n;
    }

    static void
    clear() {
        std::lock_guard<std::mutex> lock(mutex());
        records().clear();
    }

private:
    level level_;
    std::ostringstream stream_;
};

#define NIXL_FATAL standinLog(standinLog::FATAL)
#define NIXL_ERROR standinLog(standinLog::ERROR)
#define NIXL_WARN standinLog(standinLog::WARNING)
#define NIXL_INFO standinLog(standinLog::INFO)
#define NIXL_DEBUG standinLog(standinLog::DEBUG)
#define NIXL_TRACE standinLog(standinLog::TRACE)

#endif
