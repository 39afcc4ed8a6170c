//! The `wasi:filesystem` functions on `/workspace` while a call's writes
//! are staged (`sandbox/stage`): each path is resolved against the call's
//! overlay and sent to the workspace (unchanged files) or to the staging
//! folder (files the call changed), so the guest sees its own writes and
//! nobody else does until the call commits.
//!
//! Descriptors keep the workspace path they were opened at; a path a
//! guest names relative to one is joined to it lexically, like the
//! file system joins it when no symbolic link is on the way (a change
//! through a link is refused, see `Overlay::check_no_link_above`).

use std::collections::VecDeque;

use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::{Descriptor as FsDescriptor, Dir as FsDir};
use wasmtime_wasi::p2::FsResult;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, DirectoryEntry, DirectoryEntryStream, ErrorCode,
    HostDescriptor, HostDirectoryEntryStream, MetadataHashValue, NewTimestamp, OpenFlags,
    PathFlags,
};
use wasmtime_wasi::{FsPerms, OpenMode};

use super::{GuardedView, Mount, QuotaKind, refused, spend, trap};
use crate::protect::{self, Last};
use crate::stage::{Deny, Fingerprint, Found, Kind, Stage, WsPath, join, rel};

/// Links followed in a row before a path is taken as it is (the file
/// system's own limit answers past it).
const MAX_LINKS: usize = 8;

/// Which folder a staged descriptor was opened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Lower,
    Upper,
}

/// The staged state of one call's `/workspace`.
#[derive(Debug)]
pub(super) struct Staged {
    pub(super) stage: Stage,
    /// Descriptor rep -> its workspace path and the folder it is open in.
    paths: std::collections::HashMap<u32, (WsPath, Side)>,
    lower_root: Option<u32>,
    upper_root: Option<u32>,
    /// Merged listings handed out, by directory-entry-stream rep.
    listings: std::collections::HashMap<u32, VecDeque<DirectoryEntry>>,
}

impl Staged {
    /// Forgets a descriptor handle that is about to be reused.
    pub(super) fn forget(&mut self, rep: u32) {
        if Some(rep) != self.lower_root && Some(rep) != self.upper_root {
            self.paths.remove(&rep);
        }
    }

    pub(super) fn new(stage: Stage) -> Self {
        Staged {
            stage,
            paths: Default::default(),
            lower_root: None,
            upper_root: None,
            listings: Default::default(),
        }
    }
}

/// Registers the workspace preopen. The staging folder gets its
/// descriptor (one the guest never sees) with the call's first change.
pub(super) fn preopened(
    state: &mut GuardedView<'_>,
    fd: &Resource<Descriptor>,
) -> wasmtime::Result<()> {
    let Some(staged) = state.fs_guard().staged.as_mut() else {
        return Ok(());
    };
    staged.paths.insert(fd.rep(), (String::new(), Side::Lower));
    if staged.lower_root.is_none() {
        // The host's own handle on the workspace: the guest may drop the
        // preopen it was given (and ask for the preopens again).
        let lower = staged.stage.overlay.lower().try_clone()?.into_std_file();
        // Read-only: every change of a staged call goes to the stage, so
        // wasmtime-wasi itself refuses a write below, whatever the open.
        let dir = FsDir::new(
            lower,
            FsPerms::ReadOnly,
            OpenMode::READ,
            super::FILE_WORK_ON_CALLER,
        );
        let lower: Resource<FsDescriptor> = state.table().push(FsDescriptor::Dir(dir))?;
        let own = self::staged(state);
        own.lower_root = Some(lower.rep());
        own.paths.insert(lower.rep(), (String::new(), Side::Lower));
        if own.stage.overlay.has_upper() {
            push_upper(state)?;
        }
    }
    Ok(())
}

fn push_upper(state: &mut GuardedView<'_>) -> wasmtime::Result<()> {
    let upper = staged(state).stage.overlay.upper_file()?;
    let dir = FsDir::new(
        upper,
        FsPerms::ReadWrite,
        OpenMode::READ | OpenMode::WRITE,
        super::FILE_WORK_ON_CALLER,
    );
    let upper: Resource<FsDescriptor> = state.table().push(FsDescriptor::Dir(dir))?;
    let staged = staged(state);
    staged.upper_root = Some(upper.rep());
    staged
        .paths
        .insert(upper.rep(), (String::new(), Side::Upper));
    state.fs_guard().tag_rep(upper.rep(), Mount::Workspace);
    Ok(())
}

/// Makes the staging folder before the call's first change.
pub(super) fn prepare(state: &mut GuardedView<'_>) -> FsResult<Result<(), Deny>> {
    if staged(state).upper_root.is_some() {
        return Ok(Ok(()));
    }
    if let Err(e) = staged(state).stage.prepare() {
        return Ok(Err(Deny::Refused(format!(
            "the host cannot stage this call's workspace changes ({}); the user should check \
             that the state folder (SKILLBOX_STATE_DIR or XDG_STATE_HOME) is writable",
            e.kind()
        ))));
    }
    push_upper(state).map_err(trap)?;
    Ok(Ok(()))
}

/// The workspace path of `fd`, when it is a staged workspace descriptor.
pub(super) fn dir_of(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> Option<WsPath> {
    let staged = state.fs_guard().staged.as_ref()?;
    staged.paths.get(&fd.rep()).map(|(p, _)| p.clone())
}

fn side_of(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> Option<Side> {
    let staged = state.fs_guard().staged.as_ref()?;
    staged.paths.get(&fd.rep()).map(|(_, s)| *s)
}

fn staged<'a>(state: &'a mut GuardedView<'_>) -> &'a mut Staged {
    state
        .fs_guard()
        .staged
        .as_mut()
        .expect("only staged descriptors come here")
}

fn root(state: &mut GuardedView<'_>, side: Side) -> Resource<Descriptor> {
    let staged = staged(state);
    let rep = match side {
        Side::Lower => staged.lower_root,
        Side::Upper => staged.upper_root,
    }
    .expect("the roots are registered with the preopen");
    Resource::new_borrow(rep)
}

/// A refusal in words goes to the call's refusals and the guest gets
/// `not-permitted`; anything else is the file system's own answer.
fn deny<V>(state: &mut GuardedView<'_>, d: Deny) -> FsResult<V> {
    match d {
        Deny::Code(code) => refused(code),
        Deny::Refused(why) => {
            state.fs_guard().refusals.push(why);
            refused(ErrorCode::NotPermitted)
        }
    }
}

/// The workspace path `rel` names from the folder `base`.
fn resolve(base: &str, rel: &str) -> Result<WsPath, Deny> {
    join(base, rel).ok_or(Deny::Code(ErrorCode::NotPermitted))
}

/// The protected-folder check, on the path as the workspace has it.
fn protect_change(
    state: &mut GuardedView<'_>,
    action: &str,
    path: &str,
    last: Last,
) -> Result<(), Deny> {
    let lower = &staged(state).stage.overlay;
    protect::check_change(lower.lower(), path, last)
        .map_err(|refusal| Deny::Refused(refusal.message(action)))
}

pub(super) async fn open_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    path_flags: PathFlags,
    rel_path: String,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> FsResult<Resource<Descriptor>> {
    let mut path = match resolve(&base, &rel_path) {
        Ok(p) => p,
        Err(d) => return deny(state, d),
    };
    let writes = flags.contains(DescriptorFlags::WRITE) || oflags.contains(OpenFlags::TRUNCATE);
    let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
    // A link is followed by its workspace path, so that what it leads to
    // is seen (and changed) as staged. A link out of the workspace is left
    // to the file system below, which does not follow it out.
    if follow {
        for _ in 0..MAX_LINKS {
            let overlay = &staged(state).stage.overlay;
            if overlay.kind(&path) != Some(Kind::Link) {
                break;
            }
            match overlay.link_target(&path) {
                Some(target) => path = target,
                None => break,
            }
        }
    }
    if writes || oflags.contains(OpenFlags::CREATE) {
        let last = if follow { Last::Target } else { Last::Link };
        if let Err(d) = protect_change(state, "write", &path, last) {
            return deny(state, d);
        }
    }
    let side = match place_for_open(state, &path, writes, follow, oflags)? {
        Ok(side) => side,
        Err(d) => return deny(state, d),
    };
    // Below, `create` of what exists only opens it, for reading; but
    // wasmtime-wasi opens for writing whenever `create` is asked, which the
    // user's own file refuses. With `directory` it keeps its own answer.
    let oflags = match side {
        Side::Lower if !oflags.contains(OpenFlags::DIRECTORY) => oflags & !OpenFlags::CREATE,
        Side::Lower | Side::Upper => oflags,
    };
    let fd = root(state, side);
    let opened =
        super::open_on_pool(state, fd, path_flags, rel(&path).to_string(), oflags, flags).await;
    if let Ok(child) = &opened {
        state.fs_guard().tag_rep(child.rep(), Mount::Workspace);
        staged(state).paths.insert(child.rep(), (path, side));
    }
    opened
}

/// Where `path` is opened: above once the call writes to it (copied up
/// first), below while it only reads it. Going over a quota stops the
/// guest (the outer error).
fn place_for_open(
    state: &mut GuardedView<'_>,
    path: &str,
    writes: bool,
    follow: bool,
    oflags: OpenFlags,
) -> FsResult<Result<Side, Deny>> {
    let create = oflags.contains(OpenFlags::CREATE);
    let exclusive = oflags.contains(OpenFlags::EXCLUSIVE);
    let overlay = &staged(state).stage.overlay;
    let lower = match overlay.found(path) {
        Found::Upper(Kind::Link) if follow && (writes || create) => {
            return Ok(Err(Deny::Refused(format!(
                "refused to write through the symbolic link `{path}`: it leads out of the \
                 workspace"
            ))));
        }
        Found::Upper(_) => return Ok(Ok(Side::Upper)),
        Found::Missing => None,
        Found::Lower => overlay.lower_meta(path),
    };
    let lower_kind = lower.as_ref().map(|m| Fingerprint::of(m).kind);
    let budget = state.fs_guard().workspace.clone();
    Ok(match lower_kind {
        None if !create => Err(ErrorCode::NoEntry.into()),
        None => {
            spend(Some(&budget), QuotaKind::Entries, 1)?;
            if let Err(d) = prepare(state)? {
                return Ok(Err(d));
            }
            staged(state)
                .stage
                .overlay
                .stage_new_file(path)
                .map(|()| Side::Upper)
        }
        Some(Kind::File) if writes && !(create && exclusive) => {
            if let Err(d) = prepare(state)? {
                return Ok(Err(d));
            }
            let truncate = oflags.contains(OpenFlags::TRUNCATE);
            // The copy is paid for before it is made: a call cannot make
            // the host copy a file larger than its quota.
            if !truncate {
                let size = lower.as_ref().map_or(0, |m| m.len());
                spend(Some(&budget), QuotaKind::Bytes, size)?;
            }
            staged(state)
                .stage
                .overlay
                .copy_up(path, truncate)
                .map(|_| Side::Upper)
        }
        // `create` of a folder that exists, as the system answers it.
        Some(Kind::Dir) if create && !exclusive && !oflags.contains(OpenFlags::DIRECTORY) => {
            Err(ErrorCode::IsDirectory.into())
        }
        Some(kind) => {
            let side = place_existing(path, kind, writes, follow, create && exclusive);
            if side == Ok(Side::Lower)
                && kind == Kind::File
                && let Some(meta) = &lower
            {
                staged(state).stage.overlay.note_read_of(path, meta);
            }
            side
        }
    })
}

fn place_existing(
    path: &str,
    kind: Kind,
    writes: bool,
    follow: bool,
    exclusive: bool,
) -> Result<Side, Deny> {
    match kind {
        _ if exclusive => Err(ErrorCode::Exist.into()),
        Kind::Dir if writes => Err(ErrorCode::IsDirectory.into()),
        Kind::Dir => Ok(Side::Lower),
        Kind::Other => Err(Deny::Refused(super::not_a_file(path))),
        Kind::Link if writes && follow => Err(Deny::Refused(format!(
            "refused to write through the symbolic link `{path}`: a call's workspace changes \
             are staged by path; write to the link's target instead"
        ))),
        Kind::Link | Kind::File => Ok(Side::Lower),
    }
}

/// The root to read `rel_path` (from the folder `base`) under, and its
/// workspace path; `Err` is the answer when there is nothing to read.
#[allow(clippy::type_complexity)]
fn read_place<V>(
    state: &mut GuardedView<'_>,
    base: &str,
    rel_path: &str,
) -> Result<(Resource<Descriptor>, WsPath), FsResult<V>> {
    let path = resolve(base, rel_path).map_err(|d| deny(state, d))?;
    let side = side_for_read(state, &path).ok_or_else(|| refused(ErrorCode::NoEntry))?;
    Ok((root(state, side), path))
}

/// Which folder holds `path` for a read of its metadata; `None` when the
/// call deleted it.
fn side_for_read(state: &mut GuardedView<'_>, path: &str) -> Option<Side> {
    match staged(state).stage.overlay.found(path) {
        Found::Upper(_) => Some(Side::Upper),
        Found::Lower => Some(Side::Lower),
        Found::Missing => None,
    }
}

pub(super) async fn stat_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    path_flags: PathFlags,
    rel_path: String,
) -> FsResult<wasmtime_wasi::p2::bindings::filesystem::types::DescriptorStat> {
    let (fd, path) = match read_place(state, &base, &rel_path) {
        Ok(place) => place,
        Err(answer) => return answer,
    };

    HostDescriptor::stat_at(
        &mut state.filesystem(),
        fd,
        path_flags,
        rel(&path).to_string(),
    )
    .await
}

pub(super) async fn metadata_hash_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    path_flags: PathFlags,
    rel_path: String,
) -> FsResult<MetadataHashValue> {
    let (fd, path) = match read_place(state, &base, &rel_path) {
        Ok(place) => place,
        Err(answer) => return answer,
    };

    HostDescriptor::metadata_hash_at(
        &mut state.filesystem(),
        fd,
        path_flags,
        rel(&path).to_string(),
    )
    .await
}

pub(super) async fn readlink_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    rel_path: String,
) -> FsResult<String> {
    let (fd, path) = match read_place(state, &base, &rel_path) {
        Ok(place) => place,
        Err(answer) => return answer,
    };
    HostDescriptor::readlink_at(&mut state.filesystem(), fd, rel(&path).to_string()).await
}

pub(super) async fn set_times_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    path_flags: PathFlags,
    rel_path: String,
    atime: NewTimestamp,
    mtime: NewTimestamp,
) -> FsResult<()> {
    let path = match resolve(&base, &rel_path) {
        Ok(p) => p,
        Err(d) => return deny(state, d),
    };
    if let Err(d) = protect_change(state, "change", &path, Last::Target) {
        return deny(state, d);
    }
    let overlay = &staged(state).stage.overlay;
    let side = match (overlay.found(&path), overlay.kind(&path)) {
        (Found::Missing, _) | (_, None) => return refused(ErrorCode::NoEntry),
        (Found::Upper(_), _) => Side::Upper,
        // A folder's times are not a change the workspace keeps.
        (Found::Lower, Some(Kind::Dir)) => return Ok(()),
        (Found::Lower, Some(Kind::File)) => {
            if let Err(d) = prepare(state)? {
                return deny(state, d);
            }
            let size = staged(state)
                .stage
                .overlay
                .lower_meta(&path)
                .map_or(0, |m| m.len());
            let budget = state.fs_guard().workspace.clone();
            spend(Some(&budget), QuotaKind::Bytes, size)?;
            match staged(state).stage.overlay.copy_up(&path, false) {
                Ok(_) => Side::Upper,
                Err(d) => return deny(state, d),
            }
        }
        (Found::Lower, Some(_)) => {
            return deny(
                state,
                Deny::Refused(format!(
                    "refused to set the times of `{path}`: it is not a regular file"
                )),
            );
        }
    };
    let fd = root(state, side);

    HostDescriptor::set_times_at(
        &mut state.filesystem(),
        fd,
        path_flags,
        rel(&path).to_string(),
        atime,
        mtime,
    )
    .await
}

/// Whether `fd` is a file open in the workspace itself rather than in the
/// stage: one no write may reach, whatever mode it was opened in.
pub(super) fn file_below(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> bool {
    if side_of(state, fd) != Some(Side::Lower) {
        return false;
    }
    let rep: Resource<FsDescriptor> = Resource::new_borrow(fd.rep());
    matches!(state.table().get(&rep), Ok(FsDescriptor::File(_)))
}

/// `set-times` on a descriptor open in the workspace itself would change
/// it before the commit: a folder's times are ignored, a file's refused
/// (open it for writing first, which stages it).
pub(super) fn set_times_below(
    state: &mut GuardedView<'_>,
    fd: &Resource<Descriptor>,
) -> Option<FsResult<()>> {
    if side_of(state, fd)? != Side::Lower {
        return None;
    }
    let rep: Resource<FsDescriptor> = Resource::new_borrow(fd.rep());
    let is_dir = matches!(state.table().get(&rep), Ok(FsDescriptor::Dir(_)));
    if is_dir {
        return Some(Ok(()));
    }
    let path = dir_of(state, fd).unwrap_or_default();
    Some(deny(
        state,
        Deny::Refused(format!(
            "refused to set the times of `{path}` through a descriptor opened for reading; \
             open it for writing first"
        )),
    ))
}

/// Starts a listing of a staged workspace folder: the merged view when
/// the call changed anything in it, else the folder's own.
pub(super) async fn read_directory(
    state: &mut GuardedView<'_>,
    fd: Resource<Descriptor>,
    base: WsPath,
) -> FsResult<Resource<DirectoryEntryStream>> {
    let merged = {
        let overlay = &staged(state).stage.overlay;
        if overlay.touches(&base) {
            match overlay.listing(&base) {
                Ok(list) => Some(list),
                Err(d) => return deny(state, d),
            }
        } else {
            None
        }
    };
    let stream = HostDescriptor::read_directory(&mut state.filesystem(), fd).await?;
    let listings = &mut staged(state).listings;
    match merged {
        Some(list) => {
            let entries = list
                .into_iter()
                .map(|(name, kind)| DirectoryEntry {
                    type_: descriptor_type(kind),
                    name,
                })
                .collect();
            listings.insert(stream.rep(), entries);
        }
        None => {
            listings.remove(&stream.rep());
        }
    }
    Ok(stream)
}

/// Forgets any merged listing under `rep`: a new stream took that handle.
pub(super) fn new_stream(state: &mut GuardedView<'_>, rep: u32) {
    if let Some(staged) = state.fs_guard().staged.as_mut() {
        staged.listings.remove(&rep);
    }
}

pub(super) async fn read_directory_entry(
    state: &mut GuardedView<'_>,
    stream: Resource<DirectoryEntryStream>,
) -> FsResult<Option<DirectoryEntry>> {
    if let Some(staged) = state.fs_guard().staged.as_mut()
        && let Some(list) = staged.listings.get_mut(&stream.rep())
    {
        return Ok(list.pop_front());
    }
    HostDirectoryEntryStream::read_directory_entry(&mut state.filesystem(), stream).await
}

fn descriptor_type(kind: Kind) -> DescriptorType {
    match kind {
        Kind::File => DescriptorType::RegularFile,
        Kind::Dir => DescriptorType::Directory,
        Kind::Link => DescriptorType::SymbolicLink,
        Kind::Other => DescriptorType::Unknown,
    }
}

pub(super) fn create_directory_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    rel_path: String,
) -> FsResult<()> {
    let path = match resolve(&base, &rel_path) {
        Ok(p) => p,
        Err(d) => return deny(state, d),
    };
    if let Err(d) = protect_change(state, "create", &path, Last::Link) {
        return deny(state, d);
    }
    let budget = state.fs_guard().workspace.clone();
    spend(Some(&budget), QuotaKind::Entries, 1)?;
    if let Err(d) = prepare(state)? {
        return deny(state, d);
    }
    let made = staged(state).stage.overlay.mkdir(&path);
    finish(state, made)
}

fn finish(state: &mut GuardedView<'_>, done: Result<(), Deny>) -> FsResult<()> {
    match done {
        Ok(()) => Ok(()),
        Err(d) => deny(state, d),
    }
}

pub(super) fn unlink_file_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    rel_path: String,
) -> FsResult<()> {
    let path = match resolve(&base, &rel_path) {
        Ok(p) => p,
        Err(d) => return deny(state, d),
    };
    if let Err(d) = protect_change(state, "remove", &path, Last::Link) {
        return deny(state, d);
    }
    if let Err(d) = prepare(state)? {
        return deny(state, d);
    }
    let done = staged(state).stage.overlay.unlink(&path);
    finish(state, done)
}

pub(super) fn remove_directory_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    rel_path: String,
) -> FsResult<()> {
    let path = match resolve(&base, &rel_path) {
        Ok(p) => p,
        Err(d) => return deny(state, d),
    };
    if let Err(d) = protect_change(state, "remove", &path, Last::Link) {
        return deny(state, d);
    }
    if let Err(d) = prepare(state)? {
        return deny(state, d);
    }
    let done = staged(state).stage.overlay.rmdir(&path);
    finish(state, done)
}

pub(super) fn rename_at(
    state: &mut GuardedView<'_>,
    from_base: WsPath,
    from: String,
    to_base: Option<WsPath>,
    to: String,
) -> FsResult<()> {
    let Some(to_base) = to_base else {
        return refused(ErrorCode::CrossDevice);
    };
    let (from, to) = match (resolve(&from_base, &from), resolve(&to_base, &to)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(d), _) | (_, Err(d)) => return deny(state, d),
    };
    let lower = &staged(state).stage.overlay;
    let checks = protect::check_new_name(lower.lower(), &from)
        .and_then(|()| protect::check_new_name(lower.lower(), &to));
    if let Err(refusal) = checks {
        return deny(state, Deny::Refused(refusal.message("rename")));
    }
    // A link moved elsewhere must still lead inside the workspace, and not
    // into a project skill folder, from where it lands.
    if let Some(target) = staged(state).stage.overlay.raw_link(&from)
        && staged(state).stage.overlay.kind(&from) == Some(Kind::Link)
        && let Err(d) = check_link(state, &to, &target)
    {
        return deny(state, d);
    }
    // Moving a file the call had not changed copies it up first.
    let budget = state.fs_guard().workspace.clone();
    let overlay = &staged(state).stage.overlay;
    if overlay.found(&from) == Found::Lower
        && overlay.kind(&from) == Some(Kind::File)
        && let Some(meta) = overlay.lower_meta(&from)
    {
        spend(Some(&budget), QuotaKind::Bytes, meta.len())?;
    }
    if let Err(d) = prepare(state)? {
        return deny(state, d);
    }
    let done = staged(state).stage.overlay.rename(&from, &to);
    finish(state, done)
}

pub(super) fn symlink_at(
    state: &mut GuardedView<'_>,
    base: WsPath,
    target: String,
    rel_path: String,
) -> FsResult<()> {
    let path = match resolve(&base, &rel_path) {
        Ok(p) => p,
        Err(d) => return deny(state, d),
    };
    let checks = {
        let lower = staged(state).stage.overlay.lower();
        protect::check_new_name(lower, &path)
            .map_err(|refusal| Deny::Refused(refusal.message("link")))
    };
    if let Err(d) = checks.and_then(|()| check_link(state, &path, &target)) {
        return deny(state, d);
    }
    let budget = state.fs_guard().workspace.clone();
    spend(Some(&budget), QuotaKind::Entries, 1)?;
    if let Err(d) = prepare(state)? {
        return deny(state, d);
    }
    let done = staged(state).stage.overlay.symlink(&target, &path);
    finish(state, done)
}

/// A link at `link` to `target` must lead inside the workspace, and not
/// into a project skill folder by any name.
fn check_link(state: &mut GuardedView<'_>, link: &str, target: &str) -> Result<(), Deny> {
    let root = state.fs_guard().workspace_root.clone();
    match staged(state)
        .stage
        .overlay
        .link_refusal(root.as_deref(), link, target)
    {
        Some(why) => Err(Deny::Refused(why)),
        None => Ok(()),
    }
}

/// Hard links are not staged: a link made above could not be made the
/// same link below.
pub(super) fn link_at(state: &mut GuardedView<'_>, new: &str) -> FsResult<()> {
    deny(
        state,
        Deny::Refused(format!(
            "refused to make the hard link `{new}`: a call's workspace changes are staged, \
             and a hard link cannot be; copy the file instead"
        )),
    )
}
