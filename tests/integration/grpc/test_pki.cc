#include "tests/integration/grpc/test_pki.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

extern char** environ;

namespace feedguard::testing {
namespace {

Status WriteAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Internal("cannot write " + tmp);
    out << content;
    if (!out.flush()) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Internal("rename " + tmp + ": " + ec.message());
  return OkStatus();
}

Result<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Result<std::unique_ptr<TestPki>> TestPki::Create() {
  std::string templ = (std::filesystem::temp_directory_path() / "fg-pki-XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) return Internal(std::string("mkdtemp: ") + strerror(errno));
  return std::unique_ptr<TestPki>(new TestPki(templ));
}

TestPki::~TestPki() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Status TestPki::RunOpenssl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv_s = {"openssl"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  const std::string log = Path("openssl.log");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addchdir_np(&fa, dir_.c_str());
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "openssl", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Unavailable(std::string("cannot run openssl: ") + strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    auto text = ReadAll(log);
    return Internal("openssl " + args[0] + " failed: " + (text.ok() ? *text : ""));
  }
  return OkStatus();
}

Status TestPki::MakeCa(const std::string& name) {
  return RunOpenssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "2",
                     "-subj", "/CN=feedguard-test-" + name, "-addext",
                     "basicConstraints=critical,CA:TRUE", "-addext",
                     "keyUsage=critical,keyCertSign,cRLSign"});
}

Status TestPki::MakeLeaf(const std::string& ca, const std::string& name, const std::string& cn,
                         const std::vector<std::string>& sans, bool server,
                         const std::string& org) {
  std::string ext = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n";
  ext += std::string("extendedKeyUsage=") + (server ? "serverAuth" : "clientAuth") + "\n";
  if (!sans.empty()) {
    ext += "subjectAltName=";
    for (size_t i = 0; i < sans.size(); ++i) ext += (i ? "," : "") + sans[i];
    ext += "\n";
  }
  FG_RETURN_IF_ERROR(WriteAtomically(Path(name + ".ext"), ext));
  // Build into temp names, then move both into place.
  FG_RETURN_IF_ERROR(RunOpenssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                 "-nodes", "-keyout", name + ".key.new", "-out", name + ".csr",
                                 "-subj", (org.empty() ? "" : "/O=" + org) + "/CN=" + cn}));
  FG_RETURN_IF_ERROR(RunOpenssl({"x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey",
                                 ca + ".key", "-CAcreateserial", "-out", name + ".crt.new", "-days",
                                 "2", "-extfile", name + ".ext"}));
  FG_RETURN_IF_ERROR(CopyAtomically(name + ".key.new", name + ".key"));
  return CopyAtomically(name + ".crt.new", name + ".crt");
}

Status TestPki::CopyAtomically(const std::string& from, const std::string& to) const {
  return ConcatAtomically({from}, to);
}

Status TestPki::ConcatAtomically(const std::vector<std::string>& parts,
                                 const std::string& to) const {
  std::string content;
  for (const auto& p : parts) {
    FG_ASSIGN_OR_RETURN(std::string text, ReadAll(Path(p)));
    content += text;
  }
  return WriteAtomically(Path(to), content);
}

}  // namespace feedguard::testing
