//! Noticing that components' files changed on disk, so that a loaded component is never run after
//! its files were replaced or removed.
//!
//! On Linux the components folder is watched with inotify: every change made on this machine
//! (a rename over a file, a removal, a write) is queued by the kernel before the call that made it
//! returns, and [`Watcher::drain`] reads the queue without blocking at every load, which costs a
//! fraction of a `stat`. Elsewhere, when the watch cannot be set up (the per-user inotify limits),
//! when it is lost (the folder itself moved or removed), or when the operator asks for it
//! ([`FileChecks::EveryLoad`], for folders written from other machines), every load compares the
//! compiled file's identity instead (one `stat`).

use std::path::Path;

/// How a loaded component notices that its files on disk changed or vanished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileChecks {
    /// Watch the components folder (inotify on Linux): changes made on this machine are noticed
    /// at the next load without a `stat`. Falls back to [`FileChecks::EveryLoad`] where the folder
    /// cannot be watched.
    #[default]
    Watch,
    /// `stat` the compiled file at every load: also notices changes made from other machines (a
    /// network file system), for about two microseconds per event.
    EveryLoad,
}

/// What changed since the last [`Watcher::drain`].
#[derive(Debug, PartialEq, Eq)]
pub enum Changes {
    /// The files of these plugin versions (`name@version` stems) changed.
    Stems(Vec<String>),
    /// Changes may have been missed (the kernel's queue overflowed, or the watch ended): forget
    /// everything.
    Everything,
}

/// The watch on a components folder, or none (then every load checks the file itself).
pub struct Watcher {
    #[cfg(target_os = "linux")]
    inotify: Option<linux::Inotify>,
}

impl Watcher {
    /// Watches `dir` when `checks` asks for it and the platform allows it.
    pub fn new(dir: &Path, checks: FileChecks) -> Self {
        #[cfg(target_os = "linux")]
        {
            let inotify = match checks {
                FileChecks::EveryLoad => None,
                FileChecks::Watch => match linux::Inotify::new(dir) {
                    Ok(inotify) => Some(inotify),
                    Err(e) => {
                        tracing::warn!(
                            dir = %dir.display(),
                            error = %e,
                            "cannot watch the components folder; each load checks its file instead"
                        );
                        None
                    }
                },
            };
            Self { inotify }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (dir, checks);
            Self {}
        }
    }

    /// Whether the folder is watched: a known, loaded component may run without a `stat`.
    pub fn watching(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.inotify.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// The changes queued since the last call, without blocking; `None` when there are none (or
    /// nothing is watched). After [`Changes::Everything`] because the watch ended, nothing is
    /// watched any more.
    pub fn drain(&mut self) -> Option<Changes> {
        #[cfg(target_os = "linux")]
        {
            let inotify = self.inotify.as_mut()?;
            let drained = inotify.drain();
            if drained.ended {
                tracing::warn!(
                    "the components folder is no longer watched; each load checks its file instead"
                );
                self.inotify = None;
            }
            drained.changes
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }
}

/// The plugin version (`name@version`) a file of the components folder belongs to: its
/// component (`.wasm`) or compiled form (`.cwasm`); temporary files belong to none.
pub fn stem_of(file_name: &str) -> Option<&str> {
    file_name
        .strip_suffix(".cwasm")
        .or_else(|| file_name.strip_suffix(".wasm"))
}

#[cfg(target_os = "linux")]
mod linux {
    use std::mem::MaybeUninit;
    use std::path::Path;

    use rustix::fd::{AsFd as _, OwnedFd};
    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

    use super::{Changes, stem_of};

    pub(super) struct Inotify {
        fd: OwnedFd,
        buffer: Vec<MaybeUninit<u8>>,
    }

    pub(super) struct Drained {
        pub changes: Option<Changes>,
        /// The watch is gone (the folder moved or was removed, or reading failed).
        pub ended: bool,
    }

    impl Inotify {
        pub fn new(dir: &Path) -> std::io::Result<Self> {
            let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
            // Every way a file can be replaced, rewritten or removed; not IN_MODIFY (one event per
            // write call), since a rewrite ends with IN_CLOSE_WRITE.
            let events = WatchFlags::CREATE
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::ATTRIB
                | WatchFlags::DELETE
                | WatchFlags::MOVED_FROM
                | WatchFlags::MOVED_TO
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF
                | WatchFlags::ONLYDIR;
            inotify::add_watch(&fd, dir, events)?;
            Ok(Self {
                fd,
                buffer: vec![MaybeUninit::uninit(); 8192],
            })
        }

        pub fn drain(&mut self) -> Drained {
            let mut stems: Vec<String> = Vec::new();
            let mut everything = false;
            let mut ended = false;
            let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut self.buffer);
            loop {
                let event = match reader.next() {
                    Ok(event) => event,
                    Err(rustix::io::Errno::WOULDBLOCK) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => {
                        everything = true;
                        ended = true;
                        break;
                    }
                };
                let flags = event.events();
                if flags
                    .intersects(ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF)
                {
                    everything = true;
                    ended = true;
                } else if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    everything = true;
                }
                if let Some(stem) = event
                    .file_name()
                    .and_then(|name| name.to_str().ok())
                    .and_then(stem_of)
                    && !stems.iter().any(|s| s == stem)
                {
                    stems.push(stem.to_owned());
                }
            }
            let changes = if everything {
                Some(Changes::Everything)
            } else if stems.is_empty() {
                None
            } else {
                Some(Changes::Stems(stems))
            };
            Drained { changes, ended }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_belongs_to_the_version_of_its_stem_and_temporary_files_to_none() {
        assert_eq!(stem_of("shop@1.0.0.cwasm"), Some("shop@1.0.0"));
        assert_eq!(stem_of("shop@1.0.0.wasm"), Some("shop@1.0.0"));
        assert_eq!(stem_of("shop@1.0.0.cwasm.41.7.tmp"), None);
        assert_eq!(stem_of("notes.txt"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_watched_folder_reports_each_replaced_or_removed_file_once_and_then_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a@1.0.0.cwasm"), b"old").expect("written");
        let mut watcher = Watcher::new(dir.path(), FileChecks::Watch);
        assert!(watcher.watching());
        assert_eq!(watcher.drain(), None);

        let tmp = dir.path().join("a@1.0.0.cwasm.1.1.tmp");
        std::fs::write(&tmp, b"new").expect("written");
        std::fs::rename(&tmp, dir.path().join("a@1.0.0.cwasm")).expect("renamed");
        std::fs::write(dir.path().join("b@2.0.0.wasm"), b"bytes").expect("written");
        std::fs::remove_file(dir.path().join("b@2.0.0.wasm")).expect("removed");
        assert_eq!(
            watcher.drain(),
            Some(Changes::Stems(vec!["a@1.0.0".into(), "b@2.0.0".into()]))
        );
        assert_eq!(watcher.drain(), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_removed_folder_ends_the_watch_and_forgets_everything() {
        let parent = tempfile::tempdir().expect("temp dir");
        let dir = parent.path().join("components");
        std::fs::create_dir(&dir).expect("created");
        let mut watcher = Watcher::new(&dir, FileChecks::Watch);
        assert!(watcher.watching());
        std::fs::remove_dir(&dir).expect("removed");
        assert_eq!(watcher.drain(), Some(Changes::Everything));
        assert!(!watcher.watching(), "each load checks its file from now on");
    }

    #[test]
    fn asked_to_check_every_load_it_watches_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut watcher = Watcher::new(dir.path(), FileChecks::EveryLoad);
        assert!(!watcher.watching());
        std::fs::write(dir.path().join("a@1.0.0.cwasm"), b"x").expect("written");
        assert_eq!(watcher.drain(), None);
    }
}
