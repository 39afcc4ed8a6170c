//! `wasi:filesystem`'s host traits on [`GuardedView`]: the functions that
//! consume disk or change entries are checked first (quotas, protected
//! folders, FIFOs) and, on a staged workspace, sent to the overlay; the
//! rest are wasmtime-wasi's own.

use wasmtime::component::Resource;
use wasmtime_wasi::FsPerms;
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, Advice, Descriptor, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry,
    DirectoryEntryStream, ErrorCode, Filesize, HostDescriptor, HostDirectoryEntryStream,
    MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult};

use super::streams::{FileReader, FileWriter};
use super::{
    GuardedView, Mount, QuotaKind, counted, door, file_size, guard, overlay, refused, spend,
    spend_write,
};
use crate::protect::{self, Last};

impl preopens::Host for GuardedView<'_> {
    fn get_directories(&mut self) -> wasmtime::Result<Vec<(Resource<Descriptor>, String)>> {
        let mut dirs = Vec::new();
        for pinned in self.fs_guard().pinned_preopens.clone() {
            let fd = self
                .table()
                .push(Descriptor::Dir(pinned.dir))
                .map_err(|e| {
                    wasmtime::Error::new(e).context(format!("preopen {}", pinned.guest))
                })?;
            dirs.push((fd, pinned.guest.to_string()));
        }
        dirs.extend(preopens::Host::get_directories(&mut self.filesystem())?);
        for (fd, guest) in &dirs {
            if guest == crate::grants::DOOR_MOUNT {
                // The door's files count against the scratch quota.
                self.fs_guard().tag(fd, Some(Mount::Scratch));
                self.fs_guard().door_roots.insert(fd.rep());
                continue;
            }
            let mount = Mount::from_guest_path(guest);
            self.fs_guard().tag(fd, mount);
            if mount == Some(Mount::Workspace) {
                overlay::preopened(self, fd)?;
            }
        }
        Ok(dirs)
    }
}

impl types::Host for GuardedView<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        types::Host::convert_error_code(&mut self.filesystem(), err)
    }

    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.filesystem(), err)
    }
}

/// A staged call's writes go to the stage: a file open in the workspace
/// itself is never written, as if it were open for reading only.
fn refuse_below(state: &mut GuardedView<'_>, fd: &Resource<Descriptor>) -> FsResult<()> {
    match overlay::file_below(state, fd) {
        true => refused(ErrorCode::BadDescriptor),
        false => Ok(()),
    }
}

impl HostDescriptor for GuardedView<'_> {
    async fn write(
        &mut self,
        fd: Resource<Descriptor>,
        buf: Vec<u8>,
        offset: Filesize,
    ) -> FsResult<Filesize> {
        refuse_below(self, &fd)?;
        spend_write(self, &fd, offset, buf.len() as u64)?;
        HostDescriptor::write(&mut self.filesystem(), fd, buf, offset).await
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        refuse_below(self, &fd)?;
        // The stream starts at `offset`: what lies between the end and
        // there becomes part of the file with its first byte.
        spend_write(self, &fd, offset, 0)?;
        let budget = self.fs_guard().budget_of(&fd);
        // wasmtime-wasi's checks, in place of its stream.
        let file = match self.table().get(&fd)? {
            Descriptor::File(f) if f.perms == FsPerms::ReadOnly => {
                return refused(ErrorCode::NotPermitted);
            }
            Descriptor::File(f) => f.file.clone(),
            Descriptor::Dir(_) => return refused(ErrorCode::BadDescriptor),
        };
        let writer: DynOutputStream = Box::new(FileWriter::new(file, offset));
        let stream = self.table().push(writer)?;
        counted(self, stream, budget)
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        refuse_below(self, &fd)?;
        let budget = self.fs_guard().budget_of(&fd);
        let stream = HostDescriptor::append_via_stream(&mut self.filesystem(), fd)?;
        counted(self, stream, budget)
    }

    async fn set_size(&mut self, fd: Resource<Descriptor>, size: Filesize) -> FsResult<()> {
        refuse_below(self, &fd)?;
        if let Some(budget) = self.fs_guard().budget_of(&fd) {
            let grows_by = size.saturating_sub(file_size(self, &fd));
            spend(Some(&budget), QuotaKind::Bytes, grows_by)?;
        }
        HostDescriptor::set_size(&mut self.filesystem(), fd, size).await
    }

    async fn open_at(
        &mut self,
        fd: Resource<Descriptor>,
        path_flags: PathFlags,
        path: String,
        oflags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Resource<Descriptor>> {
        if let Some(number) = door::reply_number(self, &fd, &path, oflags, flags) {
            door::answer(self, &number).await?;
        }
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::open_at(self, base, path_flags, path, oflags, flags).await;
        }
        // One stat serves both checks below. Opening a FIFO or a device
        // blocks the host thread that opens it until someone else opens
        // the other end, which may be never: such files are not opened.
        let probe = Resource::new_borrow(fd.rep());
        let existing =
            HostDescriptor::stat_at(&mut self.filesystem(), probe, path_flags, path.clone())
                .await
                .ok();
        if let Some(stat) = &existing
            && !matches!(
                stat.type_,
                DescriptorType::RegularFile
                    | DescriptorType::Directory
                    | DescriptorType::SymbolicLink
            )
        {
            self.fs_guard().refusals.push(super::not_a_file(&path));
            return refused(ErrorCode::NotPermitted);
        }
        let changes = oflags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
            || flags.intersects(DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY);
        if changes {
            let last = if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
                Last::Target
            } else {
                Last::Link
            };
            let check = |dir: &std::fs::File| protect::check_change(dir, &path, last);
            guard(self, "write", &[(&fd, &check)])?;
        }
        let mount = self.fs_guard().mount_of(&fd);
        if let Some(budget) = self.fs_guard().budget_of(&fd)
            && oflags.contains(OpenFlags::CREATE)
            && existing.is_none()
        {
            spend(Some(&budget), QuotaKind::Entries, 1)?;
        }
        let child = super::open_on_pool(self, fd, path_flags, path, oflags, flags).await?;
        self.fs_guard().tag(&child, mount);
        Ok(child)
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::create_directory_at(self, base, path);
        }
        let check = |dir: &std::fs::File| protect::check_change(dir, &path, Last::Link);
        guard(self, "create", &[(&fd, &check)])?;
        spend(
            self.fs_guard().budget_of(&fd).as_ref(),
            QuotaKind::Entries,
            1,
        )?;
        HostDescriptor::create_directory_at(&mut self.filesystem(), fd, path).await
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<Descriptor>,
        target: String,
        link: String,
    ) -> FsResult<()> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::symlink_at(self, base, target, link);
        }
        let root = self.fs_guard().workspace_root.clone();
        let check = |dir: &std::fs::File| {
            protect::check_new_name(dir, &link)?;
            protect::check_link_target(&target)?;
            match &root {
                Some(root) => protect::check_link_inside(dir, &link, &target, root),
                None => Ok(()),
            }
        };
        guard(self, "link", &[(&fd, &check)])?;
        spend(
            self.fs_guard().budget_of(&fd).as_ref(),
            QuotaKind::Entries,
            1,
        )?;
        HostDescriptor::symlink_at(&mut self.filesystem(), fd, target, link).await
    }

    async fn link_at(
        &mut self,
        fd: Resource<Descriptor>,
        old_flags: PathFlags,
        old: String,
        new_fd: Resource<Descriptor>,
        new: String,
    ) -> FsResult<()> {
        if overlay::dir_of(self, &fd).is_some() || overlay::dir_of(self, &new_fd).is_some() {
            return overlay::link_at(self, &new);
        }
        // A hard link to a protected file would be a writable alias.
        let from = |dir: &std::fs::File| protect::check_change(dir, &old, Last::Link);
        let to = |dir: &std::fs::File| protect::check_new_name(dir, &new);
        guard(self, "link", &[(&fd, &from), (&new_fd, &to)])?;
        spend(
            self.fs_guard().budget_of(&new_fd).as_ref(),
            QuotaKind::Entries,
            1,
        )?;
        HostDescriptor::link_at(&mut self.filesystem(), fd, old_flags, old, new_fd, new).await
    }

    async fn rename_at(
        &mut self,
        fd: Resource<Descriptor>,
        old: String,
        new_fd: Resource<Descriptor>,
        new: String,
    ) -> FsResult<()> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            let to_base = overlay::dir_of(self, &new_fd);
            return overlay::rename_at(self, base, old, to_base, new);
        }
        if overlay::dir_of(self, &new_fd).is_some() {
            return refused(ErrorCode::CrossDevice);
        }
        let from = |dir: &std::fs::File| protect::check_new_name(dir, &old);
        let to = |dir: &std::fs::File| protect::check_new_name(dir, &new);
        guard(self, "rename", &[(&fd, &from), (&new_fd, &to)])?;
        HostDescriptor::rename_at(&mut self.filesystem(), fd, old, new_fd, new).await
    }

    async fn unlink_file_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<()> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::unlink_file_at(self, base, path);
        }
        let check = |dir: &std::fs::File| protect::check_change(dir, &path, Last::Link);
        guard(self, "remove", &[(&fd, &check)])?;
        HostDescriptor::unlink_file_at(&mut self.filesystem(), fd, path).await
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<Descriptor>,
        path: String,
    ) -> FsResult<()> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::remove_directory_at(self, base, path);
        }
        let check = |dir: &std::fs::File| protect::check_change(dir, &path, Last::Link);
        guard(self, "remove", &[(&fd, &check)])?;
        HostDescriptor::remove_directory_at(&mut self.filesystem(), fd, path).await
    }

    // The functions that only read: on a staged workspace they see the
    // call's own changes; elsewhere they are wasmtime-wasi's.

    async fn stat_at(
        &mut self,
        fd: Resource<Descriptor>,
        flags: PathFlags,
        path: String,
    ) -> FsResult<DescriptorStat> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::stat_at(self, base, flags, path).await;
        }
        HostDescriptor::stat_at(&mut self.filesystem(), fd, flags, path).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<Descriptor>,
        flags: PathFlags,
        path: String,
    ) -> FsResult<MetadataHashValue> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::metadata_hash_at(self, base, flags, path).await;
        }
        HostDescriptor::metadata_hash_at(&mut self.filesystem(), fd, flags, path).await
    }

    async fn readlink_at(&mut self, fd: Resource<Descriptor>, path: String) -> FsResult<String> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::readlink_at(self, base, path).await;
        }
        HostDescriptor::readlink_at(&mut self.filesystem(), fd, path).await
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<Descriptor>,
        flags: PathFlags,
        path: String,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::set_times_at(self, base, flags, path, atime, mtime).await;
        }
        HostDescriptor::set_times_at(&mut self.filesystem(), fd, flags, path, atime, mtime).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<Descriptor>,
        atime: NewTimestamp,
        mtime: NewTimestamp,
    ) -> FsResult<()> {
        if let Some(answer) = overlay::set_times_below(self, &fd) {
            return answer;
        }
        HostDescriptor::set_times(&mut self.filesystem(), fd, atime, mtime).await
    }

    async fn read_directory(
        &mut self,
        fd: Resource<Descriptor>,
    ) -> FsResult<Resource<DirectoryEntryStream>> {
        if let Some(base) = overlay::dir_of(self, &fd) {
            return overlay::read_directory(self, fd, base).await;
        }
        let stream = HostDescriptor::read_directory(&mut self.filesystem(), fd).await?;
        overlay::new_stream(self, stream.rep());
        Ok(stream)
    }

    // Unchanged: wasmtime-wasi's own.

    async fn advise(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
        len: Filesize,
        advice: Advice,
    ) -> FsResult<()> {
        HostDescriptor::advise(&mut self.filesystem(), fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync_data(&mut self.filesystem(), fd).await
    }

    async fn get_flags(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorFlags> {
        HostDescriptor::get_flags(&mut self.filesystem(), fd).await
    }

    async fn get_type(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorType> {
        HostDescriptor::get_type(&mut self.filesystem(), fd).await
    }

    async fn read(
        &mut self,
        fd: Resource<Descriptor>,
        len: Filesize,
        offset: Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        HostDescriptor::read(&mut self.filesystem(), fd, len, offset).await
    }

    async fn sync(&mut self, fd: Resource<Descriptor>) -> FsResult<()> {
        HostDescriptor::sync(&mut self.filesystem(), fd).await
    }

    async fn stat(&mut self, fd: Resource<Descriptor>) -> FsResult<DescriptorStat> {
        HostDescriptor::stat(&mut self.filesystem(), fd).await
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<Descriptor>,
        offset: Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        let file = match self.table().get(&fd)? {
            Descriptor::File(f) => f.file.clone(),
            Descriptor::Dir(_) => return refused(ErrorCode::IsDirectory),
        };
        let reader: DynInputStream = Box::new(FileReader::new(file, offset));
        Ok(self.table().push(reader)?)
    }

    async fn is_same_object(
        &mut self,
        a: Resource<Descriptor>,
        b: Resource<Descriptor>,
    ) -> wasmtime::Result<bool> {
        HostDescriptor::is_same_object(&mut self.filesystem(), a, b).await
    }

    async fn metadata_hash(&mut self, fd: Resource<Descriptor>) -> FsResult<MetadataHashValue> {
        HostDescriptor::metadata_hash(&mut self.filesystem(), fd).await
    }

    fn drop(&mut self, fd: Resource<Descriptor>) -> wasmtime::Result<()> {
        HostDescriptor::drop(&mut self.filesystem(), fd)
    }
}

impl HostDirectoryEntryStream for GuardedView<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<DirectoryEntryStream>,
    ) -> FsResult<Option<DirectoryEntry>> {
        overlay::read_directory_entry(self, stream).await
    }

    fn drop(&mut self, stream: Resource<DirectoryEntryStream>) -> wasmtime::Result<()> {
        HostDirectoryEntryStream::drop(&mut self.filesystem(), stream)
    }
}
