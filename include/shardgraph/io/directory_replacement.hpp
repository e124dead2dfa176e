#pragma once
// directory_replacement: a checkpoint directory is replaced as a whole, never edited in place, so
// that a crash, a kill -9 or a full disk at any moment of a save leaves a loadable checkpoint.
//
// Names, for the final directory F (say "ckpt/step-400") and a save id (the saving process's pid):
//   T = "F.tmp.<id>"   the new directory, being written
//   A = "F.old.<id>"   the previous F, moved aside during the swap
// A directory is COMPLETE when it holds its marker file (a checkpoint's manifest), which is written
// into it last, after every other file of it is synced, and is removed from it first.
//
// The save (one process does every directory operation; in a collective save that is rank 0, and
// the other ranks only write their own files into T between two barriers):
//   1. recover(F)             undo or finish an interrupted save of F; remove leftover T's and A's
//   2. create T
//   3. write the files into T, sync each (every rank); barrier
//   4. write the marker into T, sync it and T             T is complete
//   5. rename F -> A, sync the parent                     (skipped when F does not exist)
//   6. rename T -> F, sync the parent                     F is the new checkpoint
//   7. remove A, its marker first
// INVARIANT: at every instant there is a complete checkpoint under one of these names, and the
// newest complete one is found by this rule: F if complete, else the complete T, else the complete A.
// A crash in 1-4 leaves F as it was (T incomplete); in 4-5, F and T both complete (F is kept);
// in 5-6, F absent, A and T complete (T wins: it is newer); in 6-7, F complete (A, maybe partly
// removed, is no longer complete since its marker went first). So:
//   - a loader reads complete_directory(F): the directory that the rule picks, renaming nothing;
//   - the next save's recover(F) renames that directory to F and removes every other T and A.
// The only state without a complete checkpoint is the first save of F before step 4, when none
// existed. One save of a given F may run at a time.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/io/atomic_file_writer.hpp"
#include "shardgraph/io/durable_files.hpp"

namespace shardgraph::io {

// What a save of a directory writes: the marker that makes it complete, and which file names are
// its own (an existing F holding anything else is refused, not deleted).
struct directory_kind {
  std::string_view what;                     // "checkpoint", in messages
  std::string_view marker;                   // e.g. "shardgraph-checkpoint.json"
  bool (*owns)(std::string_view file_name);  // a name that a save of this kind writes
};

// The stages of a save, after each of which save_hooks::after_stage is called (by the process that
// did it): tests interrupt a save there, by throwing or by killing the process.
enum class save_stage {
  staging_created,       // 2: T exists, empty
  files_written,         // 3: this rank's files are in T (called on every rank)
  staging_complete,      // 4: T holds the marker
  previous_moved_aside,  // 5: F renamed to A
  new_in_place,          // 6: T renamed to F
  previous_removed,      // 7: A removed
};

struct save_hooks {
  // Called by the process that completes T, with T's path, before the marker is written: the place
  // to add files of its own (a config.json) to the new directory.
  std::function<void(const std::string& directory)> add_files;
  std::function<void(save_stage)> after_stage;  // may throw; null: none
  void operator()(save_stage s) const {
    if (after_stage) after_stage(s);
  }
};

namespace detail {

// "ckpt/step-400/" names the directory "ckpt/step-400": its siblings are found beside it.
inline std::string without_trailing_separators(std::string path) {
  while (path.size() > 1 && (path.back() == '/' || path.back() == '\\')) path.pop_back();
  return path;
}

inline std::string staging_name(const std::string& final, long id) {
  return final + ".tmp." + std::to_string(id);
}
inline std::string aside_name(const std::string& final, long id) {
  return final + ".old." + std::to_string(id);
}

inline bool is_complete(const std::filesystem::path& directory, std::string_view marker) {
  std::error_code ec;
  return std::filesystem::is_directory(directory, ec) &&
         std::filesystem::is_regular_file(directory / std::string(marker), ec);
}

// The leftover T's and A's of F (directories named F.tmp.<id> and F.old.<id>).
struct leftovers {
  std::vector<std::filesystem::path> staging, aside;
};
inline leftovers find_leftovers(const std::string& final) {
  const std::filesystem::path f(final);
  const std::filesystem::path parent = f.parent_path().empty() ? std::filesystem::path(".") : f.parent_path();
  const std::string stem = f.filename().string();
  leftovers found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ignored;
    if (!it->is_directory(ignored)) continue;
    if (temporary_owner(name, stem) >= 0) found.staging.push_back(it->path());
    if (numbered_name_id(name, stem, ".old.") >= 0) found.aside.push_back(it->path());
  }
  return found;
}

// Removes a directory, its marker first so that a partial removal never looks complete.
inline void remove_directory(const std::filesystem::path& directory, std::string_view marker) {
  std::error_code ec;
  if (std::filesystem::remove(directory / std::string(marker), ec)) sync_directory(directory.string());
  std::filesystem::remove_all(directory, ec);
  if (ec)
    fail(directory.string(), "cannot remove this leftover of an earlier save: " + ec.message(),
         "remove it by hand, or check the permissions of its parent directory");
}

inline void rename_directory(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec)
    fail(from.string(), "cannot rename it to " + to.string() + ": " + ec.message(),
         "check the permissions of the parent directory");
  sync_directory(to.parent_path().empty() ? "." : to.parent_path().string());
}

}  // namespace detail

// The complete directory that holds the newest saved F (the rule above), or nullopt when there is
// none. Renames nothing: ranks may call it together.
inline std::optional<std::string> complete_directory(const std::string& final, std::string_view marker) {
  if (detail::is_complete(final, marker)) return final;
  const detail::leftovers l = detail::find_leftovers(final);
  for (const auto* group : {&l.staging, &l.aside})
    for (const auto& d : *group)
      if (detail::is_complete(d, marker)) return d.string();
  return std::nullopt;
}

// Step 1: makes F the newest complete saved directory (if any) and removes every other T and A.
inline void recover_directory(const std::string& final, std::string_view marker) {
  const std::optional<std::string> newest = complete_directory(final, marker);
  if (newest && *newest != final) {
    std::error_code ec;
    if (std::filesystem::exists(final, ec))
      detail::remove_directory(final, marker);  // incomplete: no checkpoint
    detail::rename_directory(*newest, final);
  }
  const detail::leftovers l = detail::find_leftovers(final);
  for (const auto* group : {&l.staging, &l.aside})
    for (const auto& d : *group) detail::remove_directory(d, marker);
}

// Steps 1 and 2: returns T, new and empty. Refuses an F that holds files a save of `kind` does not
// write (they would be lost with the old F).
inline std::string begin_replacing_directory(const std::string& final, long id, const directory_kind& kind) {
  const std::string where = std::string(kind.what) + " " + final;
  std::error_code ec;
  if (std::filesystem::exists(final, ec) && !std::filesystem::is_directory(final, ec))
    fail(where, "exists and is not a directory", "give the path of a directory, or remove the file");
  if (std::filesystem::is_directory(final, ec))
    for (std::filesystem::directory_iterator it(final, ec), end; !ec && it != end; it.increment(ec))
      if (const std::string name = it->path().filename().string(); !kind.owns(name))
        fail(where,
             "holds '" + name + "', which is not part of a " + std::string(kind.what) +
                 ": saving replaces the whole directory and would delete it",
             "save into a new or empty directory, or move '" + name + "' elsewhere");
  recover_directory(final, kind.marker);
  const std::filesystem::path parent = std::filesystem::path(final).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string staging = detail::staging_name(final, id);
  if (!ec) std::filesystem::create_directory(staging, ec);
  if (ec)
    fail(where, "cannot create the directory " + staging + ": " + ec.message(),
         "check the path and its permissions");
  return staging;
}

// Step 4: the marker, written last into T and synced with T, makes T complete.
inline void write_marker(const std::string& staging, const directory_kind& kind, std::string_view text) {
  atomic_file_writer marker((std::filesystem::path(staging) / std::string(kind.marker)).string());
  marker.write(text);
  marker.commit();
}

// Steps 5 to 7, once T holds every file and the marker (step 4).
inline void finish_replacing_directory(const std::string& final, long id, const directory_kind& kind,
                                       const save_hooks& hooks = {}) {
  const std::string staging = detail::staging_name(final, id), aside = detail::aside_name(final, id);
  sync_directory(staging);
  std::error_code ec;
  const bool had_previous = std::filesystem::exists(final, ec);
  if (had_previous) {
    detail::rename_directory(final, aside);
    hooks(save_stage::previous_moved_aside);
  }
  detail::rename_directory(staging, final);
  hooks(save_stage::new_in_place);
  if (had_previous) detail::remove_directory(aside, kind.marker);
  hooks(save_stage::previous_removed);
}

// A single process's replacement of F: write into path(), then commit(); without commit() (an
// exception on the way) T is removed and F stays as it was.
class directory_replacement {
 public:
  directory_replacement(std::string final, const directory_kind& kind, save_hooks hooks = {})
      : final_(detail::without_trailing_separators(std::move(final))),
        kind_(kind),
        hooks_(std::move(hooks)),
        id_(this_process_id()),
        staging_(begin_replacing_directory(final_, id_, kind_)) {
    hooks_(save_stage::staging_created);
  }
  directory_replacement(const directory_replacement&) = delete;
  directory_replacement& operator=(const directory_replacement&) = delete;
  ~directory_replacement() {
    if (committed_) return;
    std::error_code ignored;
    std::filesystem::remove_all(staging_, ignored);
  }

  const std::string& path() const { return staging_; }
  // Writes add_files' files, then `marker_text` as the marker (synced), then swaps T into F.
  void commit(std::string_view marker_text) {
    hooks_(save_stage::files_written);
    if (hooks_.add_files) hooks_.add_files(staging_);
    write_marker(staging_, kind_, marker_text);
    hooks_(save_stage::staging_complete);
    finish_replacing_directory(final_, id_, kind_, hooks_);
    committed_ = true;
  }

 private:
  std::string final_;
  directory_kind kind_;
  save_hooks hooks_;
  long id_;
  std::string staging_;
  bool committed_ = false;
};

}  // namespace shardgraph::io
