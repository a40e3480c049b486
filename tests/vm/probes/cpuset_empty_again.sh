# A kernel probe, not a test (no ctest): can a populated v2 cgroup get its empty cpuset.cpus back?
# Run in the VM's cgroup v2 kernel with busybox's sh:
#   tests/vm/run_in_vm.sh --file tests/vm/probes/cpuset_empty_again.sh:/probe.sh -- /bin/busybox sh /probe.sh
# Seen on 6.1.0-57-cloud-amd64 (2026-11-29): the direct empty write is refused (ENOSPC) at the
# container and at the pod level; turning cpuset off and on in the pod's cgroup.subtree_control
# gives the container an empty cpuset.cpus again and its task the pod's CPUs (docs/DESIGN.md §4).
cd /sys/fs/cgroup
mkdir -p fgx-pod
echo "+cpuset +cpu" > fgx-pod/cgroup.subtree_control
mkdir -p fgx-pod/ctr
sleep 600 &
pid=$!
echo $pid > fgx-pod/ctr/cgroup.procs
echo "ctr cpuset.cpus initial: [$(cat fgx-pod/ctr/cpuset.cpus)] eff [$(cat fgx-pod/ctr/cpuset.cpus.effective)]"
echo 0 > fgx-pod/ctr/cpuset.cpus
echo "after pin: [$(cat fgx-pod/ctr/cpuset.cpus)] eff [$(cat fgx-pod/ctr/cpuset.cpus.effective)] task $(grep Cpus_allowed_list /proc/$pid/status)"
echo "" > fgx-pod/ctr/cpuset.cpus
echo "empty write rc=$? now [$(cat fgx-pod/ctr/cpuset.cpus)]"
echo "-cpuset" > fgx-pod/cgroup.subtree_control
echo "disable rc=$? cpuset files in ctr: $(ls fgx-pod/ctr | grep -c cpuset) task $(grep Cpus_allowed_list /proc/$pid/status)"
echo "+cpuset" > fgx-pod/cgroup.subtree_control
echo "enable rc=$? now [$(cat fgx-pod/ctr/cpuset.cpus)] eff [$(cat fgx-pod/ctr/cpuset.cpus.effective)] task $(grep Cpus_allowed_list /proc/$pid/status)"
echo "pod subtree_control: $(cat fgx-pod/cgroup.subtree_control)"
# the pod level itself: pinned, then the parent's toggle
echo 1 > fgx-pod/cpuset.cpus
echo "pod pinned: [$(cat fgx-pod/cpuset.cpus)]"
echo "" > fgx-pod/cpuset.cpus
echo "pod empty write rc=$? now [$(cat fgx-pod/cpuset.cpus)]"
kill $pid
wait $pid 2>/dev/null
sleep 0.2
echo "after the task ended: empty write on ctr:"; echo 0 > fgx-pod/ctr/cpuset.cpus; echo "" > fgx-pod/ctr/cpuset.cpus; echo "rc=$? now [$(cat fgx-pod/ctr/cpuset.cpus)]"
rmdir fgx-pod/ctr fgx-pod
uname -r
