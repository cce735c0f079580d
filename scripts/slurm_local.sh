#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, with accounting, from the distribution's packages.
# Run as root (a root shell, or `sudo` in front where the machine has it):
#
#   scripts/slurm_local.sh up            install (apt-get, Debian 12: slurmctld slurmd slurmdbd slurm-client
#                                        munge mariadb-server), write the configs, create the accounting
#                                        database, cluster, account and user, start the daemons
#   scripts/slurm_local.sh status        each daemon's pid and whether it runs; sinfo
#   scripts/slurm_local.sh down          stop the daemons by their pids (slurmd, slurmctld, slurmdbd,
#                                        mariadb, munged), waiting until each has exited
#
# Idempotent: `up` twice starts nothing twice and keeps the accounting database (and its password);
# the configs are rewritten each time from this machine's CPUs and memory (`slurmd -C`).
# Accounting (slurmdbd on MariaDB): `sacct` and `sacctmgr` answer the executor plugin (account
# checks, a failed job's reason) and the SLURM test (each job's memory); the profile reads the jobs'
# states from `squeue` (docs/scale_out.md). Memory requests are enforced by
# polling (JobAcctGatherParams=OverMemoryKill), not by cgroups, which containers often lack.
#
# Settings (environment): SLURM_LOCAL_CLUSTER (cluster name, default opflow-local),
# SLURM_LOCAL_ACCOUNT (account, default opflow), SLURM_LOCAL_USERS (users added to the account,
# default: root and, when run through sudo, $SUDO_USER).
set -euo pipefail

CLUSTER=${SLURM_LOCAL_CLUSTER:-opflow-local}
ACCOUNT=${SLURM_LOCAL_ACCOUNT:-opflow}
USERS=${SLURM_LOCAL_USERS:-root ${SUDO_USER:-}}
PARTITION=local
ETC=/etc/slurm
RUN=/run/slurm
LOG=/var/log/slurm
DB=slurm_acct_db
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)

# daemon name -> pid file
declare -A PIDFILE=(
    [munged]=/run/munge/munged.pid
    [mariadbd]=/run/mysqld/mysqld.pid
    [slurmdbd]=$RUN/slurmdbd.pid
    [slurmctld]=$RUN/slurmctld.pid
    [slurmd]=$RUN/slurmd.pid
)
ORDER_UP=(munged mariadbd slurmdbd slurmctld slurmd)
ORDER_DOWN=(slurmd slurmctld slurmdbd mariadbd munged)

say() { echo "slurm_local: $*" >&2; }
die() { say "$*"; exit 1; }

running_pid() {  # the pid of daemon $1 when its pid file names a live process of that program
    local f=${PIDFILE[$1]} pid
    [[ -s $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] && [[ -d /proc/$pid ]] || return 1
    [[ $(cat /proc/"$pid"/comm 2>/dev/null) == "$1"* ]] || return 1
    echo "$pid"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds
    local t=$1 what=$2
    shift 2
    for ((i = 0; i < t * 2; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what did not come up within ${t} s (logs: $LOG, /var/log/mysql)"
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]})); then
        say "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

db_password() {  # kept across runs: read back from the existing slurmdbd.conf
    if [[ -f $ETC/slurmdbd.conf ]] && grep -q '^StoragePass=' "$ETC/slurmdbd.conf"; then
        sed -n 's/^StoragePass=//p' "$ETC/slurmdbd.conf"
    else
        head -c 18 /dev/urandom | base64 | tr -d '/+='
    fi
}

write_configs() {
    local host node pass
    host=$(hostname -s)
    # "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
    node=$(slurmd -C | head -n 1)
    [[ $node == NodeName=* ]] || die "slurmd -C printed no node line: $node"
    pass=$(db_password)
    install -d -o slurm -g slurm -m 755 "$RUN" "$LOG" /var/lib/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
    install -d -m 755 "$ETC"
    cat >"$ETC/slurm.conf" <<EOF
# written by scripts/slurm_local.sh: one node, this machine
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=${PIDFILE[slurmctld]}
SlurmdPidFile=${PIDFILE[slurmd]}
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=300
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/none
$node State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$ETC/cgroup.conf" <<EOF
# written by scripts/slurm_local.sh: slurm.conf uses proctrack/linuxproc and task/none (no cgroup
# plugin), so nothing is constrained by cgroups; memory limits are enforced by OverMemoryKill
CgroupPlugin=autodetect
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
    umask 077
    cat >"$ETC/slurmdbd.conf" <<EOF
# written by scripts/slurm_local.sh: accounting in MariaDB on this machine
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=${PIDFILE[slurmdbd]}
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$pass
StorageLoc=$DB
EOF
    umask 022
    chown slurm:slurm "$ETC/slurmdbd.conf"
    chmod 600 "$ETC/slurmdbd.conf"
}

start_munged() {
    install -d -o munge -g munge -m 755 /run/munge
    [[ -s /etc/munge/munge.key ]] || { /usr/sbin/mungekey --create >/dev/null && chown munge:munge /etc/munge/munge.key; }
    runuser -u munge -- /usr/sbin/munged
    wait_for 20 munged munge -n
}

start_mariadbd() {
    install -d -o mysql -g mysql -m 755 /run/mysqld /var/log/mysql
    [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql >/dev/null
    # mariadbd stays in the foreground: detach it, its pid file is written by itself
    setsid /usr/sbin/mariadbd --user=mysql --pid-file="${PIDFILE[mariadbd]}" --socket=/run/mysqld/mysqld.sock \
        </dev/null >>/var/log/mysql/slurm_local.log 2>&1 &
    wait_for 60 mariadbd mariadb -e 'select 1'
}

create_database() {
    local pass
    pass=$(sed -n 's/^StoragePass=//p' "$ETC/slurmdbd.conf")
    mariadb <<EOF
CREATE DATABASE IF NOT EXISTS $DB;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON $DB.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
}

start_slurmdbd() {
    /usr/sbin/slurmdbd
    wait_for 60 slurmdbd sacctmgr -n list cluster
}

create_accounts() {  # sacctmgr -i: no prompt; "Nothing new added" when it exists already
    sacctmgr -i add cluster "$CLUSTER" >/dev/null || true
    sacctmgr -n list cluster format=cluster%64 | grep -qw "$CLUSTER" || die "sacctmgr did not add cluster $CLUSTER"
    sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" description=opflow organization=opflow >/dev/null || true
    for u in $USERS; do
        sacctmgr -i add user "$u" account="$ACCOUNT" defaultaccount="$ACCOUNT" cluster="$CLUSTER" >/dev/null || true
    done
}

start_slurmctld() {
    /usr/sbin/slurmctld
    wait_for 60 slurmctld scontrol ping
}

start_slurmd() {
    /usr/sbin/slurmd
    wait_for 60 "the node" node_idle
}

node_idle() {
    local state
    state=$(sinfo -h -N -o '%T' | head -n 1)
    if [[ $state == down* || $state == drain* ]]; then
        scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    fi
    [[ $state == idle* || $state == mix* || $state == alloc* ]]
}

up() {
    [[ $(id -u) == 0 ]] || die "run as root (it installs packages and starts daemons)"
    install_packages
    write_configs
    local d
    for d in "${ORDER_UP[@]}"; do
        if pid=$(running_pid "$d"); then
            say "$d already running (pid $pid)"
        else
            say "starting $d"
            "start_$d"
        fi
        [[ $d == mariadbd ]] && create_database
        [[ $d == slurmdbd ]] && create_accounts
    done
    # slurmctld re-reads slurm.conf when it was already running and the file changed
    scontrol reconfigure >/dev/null 2>&1 || true
    wait_for 60 "the node" node_idle
    say "up: $(sinfo -h -o '%P %D nodes %c cpus %m MB %T' | head -n 1); account $ACCOUNT, users: $USERS"
}

down() {
    [[ $(id -u) == 0 ]] || die "run as root"
    local d pid
    for d in "${ORDER_DOWN[@]}"; do
        if pid=$(running_pid "$d"); then
            say "stopping $d (pid $pid)"
            kill -TERM "$pid"
            for ((i = 0; i < 120; i++)); do
                [[ -d /proc/$pid ]] || break
                sleep 0.5
            done
            [[ -d /proc/$pid ]] && die "$d (pid $pid) still runs 60 s after SIGTERM"
        fi
        rm -f "${PIDFILE[$d]}"
    done
    say "down"
}

status() {
    local d pid rc=0
    for d in "${ORDER_UP[@]}"; do
        if pid=$(running_pid "$d"); then
            echo "$d running (pid $pid)"
        else
            echo "$d stopped"
            rc=3
        fi
    done
    ((rc == 0)) && sinfo
    return $rc
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
