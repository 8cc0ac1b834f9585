//! The crash tests' fault hooks: environment variables with which a test arms the process it
//! starts to kill itself (SIGKILL, as `kill -9`) at a chosen step of a write, an apply or a
//! delete, or to pause its applies.
//!
//! Compiled in only with the `fault-injection` feature, which the test suite turns on (the
//! crate's dev-dependency on itself) and no build a user runs has: without it every hook
//! reads as unset, and the binary neither reads nor names a `TIERDB_FAULT_*` variable.

/// One hook, by where it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hook {
    /// `<series id>`: the writer owning that series kills its process halfway through that
    /// series' first bucket update.
    KillMidUpdate,
    /// `<series id>:<n>`: the writer owning that series stores `n` of its raw points, then
    /// kills its process after storing the next one's time and value, before publishing it.
    KillMidRawAppend,
    /// `before_commit` kills the process after the delete's intent is durable and before
    /// any series is cut; `after_commit` after the registry is cut and one tier's slots of
    /// the first chunk cleared.
    KillMidDelete,
    /// `after_intent` kills the process once a retype's intent is durable, before any
    /// bucket changes; `after_first_tier` once the first tier's buckets are rewritten,
    /// before the others and the kinds.
    KillMidRetype,
    /// `after_write` kills the process once a compaction's `.tdc` is in place, beside the
    /// `.tdb` it replaces; `after_swap` once the `.tdb` is unlinked, before the directory is
    /// synced.
    KillMidCompaction,
    /// `<step>` or `<step>:<n>`: a cluster partition's store kills its process at that step
    /// of the `n`-th group this process applies (default the first).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    KillMidApply,
    /// Milliseconds a cluster node waits before applying each group of messages.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    ApplyPauseMs,
}

impl Hook {
    /// The hook's value, when the test that started this process armed it.
    pub(crate) fn armed(self) -> Option<String> {
        #[cfg(feature = "fault-injection")]
        {
            std::env::var(self.variable()).ok()
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            None
        }
    }

    /// The environment variable that arms the hook.
    #[cfg(feature = "fault-injection")]
    pub(crate) const fn variable(self) -> &'static str {
        match self {
            Hook::KillMidUpdate => variables::KILL_MID_UPDATE,
            Hook::KillMidRawAppend => variables::KILL_MID_RAW_APPEND,
            Hook::KillMidDelete => variables::KILL_MID_DELETE,
            Hook::KillMidRetype => variables::KILL_MID_RETYPE,
            Hook::KillMidCompaction => variables::KILL_MID_COMPACTION,
            Hook::KillMidApply => variables::KILL_MID_APPLY,
            Hook::ApplyPauseMs => variables::APPLY_PAUSE_MS,
        }
    }
}

/// Kills this process as `kill -9` would: no destructor, no flush, no unwinding.
pub(crate) fn kill_self() -> ! {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    std::process::abort()
}

/// The hooks' environment variables, for the tests that set them (see [`Hook`]).
#[cfg(feature = "fault-injection")]
pub(crate) mod variables {
    /// [`super::Hook::KillMidUpdate`].
    pub const KILL_MID_UPDATE: &str = "TIERDB_FAULT_KILL_MID_UPDATE";
    /// [`super::Hook::KillMidRawAppend`].
    pub const KILL_MID_RAW_APPEND: &str = "TIERDB_FAULT_KILL_MID_RAW_APPEND";
    /// [`super::Hook::KillMidDelete`].
    pub const KILL_MID_DELETE: &str = "TIERDB_FAULT_KILL_MID_DELETE";
    /// [`super::Hook::KillMidRetype`].
    pub const KILL_MID_RETYPE: &str = "TIERDB_FAULT_KILL_MID_RETYPE";
    /// [`super::Hook::KillMidCompaction`].
    pub const KILL_MID_COMPACTION: &str = "TIERDB_FAULT_KILL_MID_COMPACTION";
    /// [`super::Hook::KillMidApply`].
    pub const KILL_MID_APPLY: &str = "TIERDB_FAULT_KILL_MID_APPLY";
    /// [`super::Hook::ApplyPauseMs`].
    pub const APPLY_PAUSE_MS: &str = "TIERDB_FAULT_APPLY_PAUSE_MS";
}
