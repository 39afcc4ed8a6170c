//! The door's side in the guard: a guest that opens `/run/skillbox/N.reply`
//! has its request `N` answered first (`sandbox/program`).

use wasmtime::component::Resource;
use wasmtime_wasi::p2::FsResult;
use wasmtime_wasi::p2::bindings::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags};

use super::{GuardedView, trap};
use crate::program::{Door, DoorFailure};

impl super::FsGuard {
    /// Gives the call a door: its requests are answered by `door`.
    pub(crate) fn with_door(mut self, door: Option<Door>) -> Self {
        self.door = door;
        self
    }

    /// What the call asked the door for, for the audit.
    pub(crate) fn program_runs(&self) -> Vec<crate::program::ProgramRun> {
        self.door
            .as_ref()
            .map(|d| d.runs().to_vec())
            .unwrap_or_default()
    }
}

/// The request number an open of the door's `N.reply` answers, if that is
/// what this open is: read-only, right in the door's folder.
pub(super) fn reply_number(
    view: &mut GuardedView<'_>,
    fd: &Resource<Descriptor>,
    path: &str,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> Option<String> {
    let guard = view.fs_guard();
    if guard.door.is_none() || !guard.door_roots.contains(&fd.rep()) {
        return None;
    }
    let number = path.strip_suffix(".reply")?;
    let plain =
        !number.is_empty() && number.len() <= 12 && number.bytes().all(|b| b.is_ascii_digit());
    let reads = oflags == OpenFlags::empty()
        && !flags.intersects(DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY);
    (plain && reads).then(|| number.to_string())
}

/// Answers request `number`; a quota the program's changes overran stops
/// the guest like its own writes would.
pub(super) async fn answer(view: &mut GuardedView<'_>, number: &str) -> FsResult<()> {
    if view.fs_guard().staged.is_some() {
        // The program's changes are staged like the guest's own, so the
        // staging folder the guard works on is made first. If it cannot
        // be, the door's answer says so.
        let _ = super::overlay::prepare(view)?;
    }
    let guard = view.fs_guard();
    let Some(door) = guard.door.as_mut() else {
        return Ok(());
    };
    let stage = guard.staged.as_mut().map(|staged| &mut staged.stage);
    let budget = guard.workspace.clone();
    let mut spend = |kind, amount| budget.spend(kind, amount);
    match door.answer(number, stage, &mut spend).await {
        Ok(()) => Ok(()),
        Err(DoorFailure::Quota(over)) => Err(trap(over)),
        Err(DoorFailure::Host(why)) => Err(trap(crate::SandboxError::Host(why))),
    }
}
