// test_pki.h — a throw-away PKI for the gRPC stream tests (test fixture, not product code).
//
// Creates a private temp directory and, with the openssl CLI, a CA, a server certificate for
// 127.0.0.1 and client certificates for node names ("system:node:<name>" CN, O system:nodes).
// Files are replaced atomically (write to a temp name, then rename) so grpc's file watcher
// never sees a key that does not match its certificate. The directory is removed on
// destruction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "feedguard/common/status.h"

namespace feedguard::testing {

class TestPki {
 public:
  static Result<std::unique_ptr<TestPki>> Create();
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& file) const { return dir_ + "/" + file; }

  // <name>.crt and <name>.key: a self-signed CA.
  Status MakeCa(const std::string& name);
  // <name>.crt and <name>.key signed by CA <ca>. `sans` in openssl syntax, e.g.
  // {"IP:127.0.0.1"} or {"DNS:gpu-1"}; `server` picks serverAuth or clientAuth usage; `org`,
  // when set, is the subject's O (a node's: "system:nodes").
  Status MakeLeaf(const std::string& ca, const std::string& name, const std::string& cn,
                  const std::vector<std::string>& sans, bool server, const std::string& org = "");
  // Atomically replaces file `to` with the contents of `from` (both in dir()).
  Status CopyAtomically(const std::string& from, const std::string& to) const;
  // Atomically writes the concatenation of `parts` (files in dir()) to `to`.
  Status ConcatAtomically(const std::vector<std::string>& parts, const std::string& to) const;

 private:
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}
  Status RunOpenssl(const std::vector<std::string>& args) const;

  std::string dir_;
};

}  // namespace feedguard::testing
