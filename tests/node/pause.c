/* pause.c — the sandbox ("pause") process of the node tier's pods, built with `gcc -static` by
 * tests/node/images.sh so that no registry is needed. It holds the pod's namespaces: sleeps until
 * SIGINT/SIGTERM (exit 0), and as PID 1 of a shared PID namespace reaps orphaned children. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &sa, NULL);
  for (;;) {
    pause();
  }
}
