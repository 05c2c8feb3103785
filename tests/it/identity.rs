//! Who a caller is fails closed: a caller whose ancestry cannot be read to its end, or whose
//! `FLEETD_MEMBER` contradicts its process tree, is refused on the REST socket (never taken for
//! the operator) and gets nothing but fleet_whoami on the MCP socket.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use serde_json::{Value, json};

use crate::common::*;

/// (a) A process connects to `api.sock`, hands the connection to another process and exits:
/// the connection's peer pid no longer resolves. It must not be the operator.
#[test]
fn a_connection_whose_process_is_gone_is_refused_not_the_operator() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = rt.block_on(D::start());
    let sock = d.state.join("api.sock");
    let (mine, theirs) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        None,
        nix::sys::socket::SockFlag::empty(),
    )
    .unwrap();
    // SAFETY: the child only connects, sends the descriptor and exits (glibc's malloc is
    // fork-safe; no lock of ours is held across the fork).
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            let code = (|| {
                let c = UnixStream::connect(&sock).ok()?;
                let fds = [c.as_raw_fd()];
                let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
                let iov = [std::io::IoSlice::new(b"x")];
                nix::sys::socket::sendmsg::<()>(
                    theirs.as_raw_fd(),
                    &iov,
                    &cmsg,
                    nix::sys::socket::MsgFlags::empty(),
                    None,
                )
                .ok()?;
                Some(0)
            })()
            .unwrap_or(1);
            // SAFETY: leave without running the parent's destructors or atexit handlers.
            unsafe { libc::_exit(code) };
        }
        nix::unistd::ForkResult::Parent { child } => {
            let st = nix::sys::wait::waitpid(child, None).unwrap();
            assert!(
                matches!(st, nix::sys::wait::WaitStatus::Exited(_, 0)),
                "{st:?}"
            );
            let mut buf = [0u8; 1];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let msg = nix::sys::socket::recvmsg::<()>(
                mine.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                nix::sys::socket::MsgFlags::empty(),
            )
            .unwrap();
            let fd = msg
                .cmsgs()
                .unwrap()
                .find_map(|c| match c {
                    nix::sys::socket::ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
                    _ => None,
                })
                .expect("the passed connection");
            // SAFETY: a descriptor we just received and own.
            let conn = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
            let body =
                json!({"role": "worker", "name": "x", "profile": "sim", "command": sim(&[])})
                    .to_string();
            let (status, out) = http(conn, "POST", "/members", &body);
            assert_eq!(status, 403, "{out}");
            assert!(out.contains("is gone"), "{out}");
            let members: Value = rt.block_on(d.client.get("/members")).unwrap();
            assert!(members["members"].as_array().unwrap().is_empty());
        }
    }
}

/// (b) A process nested deeper than the ancestry walk goes is not the operator either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_nested_deeper_than_the_walk_is_refused() {
    let d = D::start().await;
    let dir = tempfile::tempdir().unwrap();
    let nest = dir.path().join("nest.sh");
    std::fs::write(
        &nest,
        "#!/bin/bash\nif [ \"$1\" -gt 0 ]; then n=$(( $1 - 1 )); shift; \"$0\" \"$n\" \"$@\"; exit $?; fi\nshift; exec \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&nest, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = std::process::Command::new(&nest)
        .arg("140")
        .arg(bin())
        .args([
            "spawn",
            "--role",
            "worker",
            "--name",
            "deep",
            "--profile",
            "sim",
            "--",
        ])
        .args(sim(&[]))
        .env("FLEETD_STATE_DIR", &d.state)
        .env_remove("FLEETD_MEMBER")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("deeper than 128"), "{err}");
    // The same command, not nested, is the operator.
    let o = d.cli(&["list"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A process started for one member but running in another's tree (a helper shared between
/// members), or outside every tree, answers for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_whose_fleetd_member_contradicts_its_tree_is_refused() {
    let d = D::start().await;
    let exec = sim(&["--script", "exec", "--work-ms", "0"]);
    d.spawn("w1", "worker", exec.clone()).await;
    d.spawn("w2", "worker", exec).await;
    let fleetd = bin_str();
    let r = d
        .calls_as(
            "w2",
            json!([
                {"run": ["env", "FLEETD_MEMBER=w1", fleetd, "status", "--json"]},
                {"run": [fleetd, "status", "--json"]},
            ]),
        )
        .await;
    assert_ne!(r[0]["code"], 0, "{}", r[0]);
    assert!(
        r[0]["stderr"]
            .as_str()
            .unwrap()
            .contains("was started for `w1`"),
        "{}",
        r[0]
    );
    assert_eq!(r[1]["code"], 0, "{}", r[1]);
    // Outside every member but claiming one: not the operator.
    let o = std::process::Command::new(bin())
        .args(["list"])
        .env("FLEETD_STATE_DIR", &d.state)
        .env("FLEETD_MEMBER", "w1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("outside every member's process tree"),
        "{err}"
    );
}
