//! GET, LIST and WATCH: reading objects as stored, selected and paged.

use serde_json::{json, Value};

use carrel_store::{ListOptions as StoreListOptions, Revision, Store, Watch};

use crate::crd;
use crate::go_json;
use crate::object::{self};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

use super::{decode, list_kind, prefix_for, Api, ListParams, ListVersion, Listed, Target};

impl Api {
    /// GET one object.
    pub fn get(&self, target: &Target<'_>, name: &str) -> ApiResult<Value> {
        self.shown(target.rt, &self.stored(target, name)?.1)
    }

    /// GET one object as JSON bytes, without decoding and re-encoding it.
    pub fn get_json(&self, target: &Target<'_>, name: &str) -> ApiResult<Vec<u8>> {
        let (_, object) = self.stored(target, name)?;
        let spliced = crd::shown_as_stored(target.rt, &object.value, object.mod_revision)
            .then(|| object::splice_resource_version(&object.value, object.mod_revision))
            .flatten();
        match spliced {
            Some(bytes) => Ok(bytes),
            None => Ok(go_json::to_vec(&self.shown(target.rt, &object)?)),
        }
    }

    /// LIST, as a `<Kind>List`.
    pub fn list(&self, target: &Target<'_>, params: &ListParams) -> ApiResult<Value> {
        let listed = self.list_objects(target, params)?;
        let rt = target.rt;
        let decoded = listed
            .items
            .iter()
            .map(|o| Ok((decode(o)?, o.mod_revision)))
            .collect::<ApiResult<Vec<_>>>()?;
        let items = self.present_all(rt, decoded)?;
        Ok(json!({
            "kind": list_kind(rt),
            "apiVersion": target.rt.group_version(),
            "metadata": listed.metadata(),
            "items": items,
        }))
    }

    /// LIST, as a `<Kind>List` in JSON bytes, built from the stored bytes of the items without
    /// decoding and re-encoding them (a selector still decodes each candidate to test it).
    pub fn list_json(&self, target: &Target<'_>, params: &ListParams) -> ApiResult<Vec<u8>> {
        if crd::conversion_webhook(target.rt).is_some() {
            // Converted in one call for the whole page.
            return Ok(go_json::to_vec(&self.list(target, params)?));
        }
        let listed = self.list_objects(target, params)?;
        let size: usize = listed.items.iter().map(|o| o.value.len() + 32).sum();
        let mut out = Vec::with_capacity(size + 256);
        let api_version = target.rt.group_version();
        let typed = target.rt.custom.is_none() && go_json::is_typed(&api_version, target.rt.kind);
        let list =
            go_json::list_head(&api_version, &list_kind(target.rt), typed, &listed.metadata());
        out.extend_from_slice(&list.head);
        for (i, object) in listed.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let spliced = crd::shown_as_stored(target.rt, &object.value, object.mod_revision)
                && object::splice_list_item_into(&mut out, &object.value, object.mod_revision);
            if !spliced {
                go_json::write_item(&mut out, &self.shown(target.rt, object)?);
            }
        }
        out.extend_from_slice(&list.tail);
        Ok(out)
    }

    /// The stored objects a LIST selects, with the revision it was read at.
    pub(super) fn list_objects(
        &self,
        target: &Target<'_>,
        params: &ListParams,
    ) -> ApiResult<Listed> {
        if let Some(fields) = &params.fields {
            fields.check_supported(target.rt.strategy.field_labels(target.rt))?;
        }
        let prefix = prefix_for(target.rt, target.namespace.as_deref());
        let filtering = params.labels.as_ref().is_some_and(|l| !l.is_everything())
            || params.fields.as_ref().is_some_and(|f| !f.is_everything());
        let (exact, minimum) = match params.version {
            ListVersion::MostRecent | ListVersion::Any => (None, None),
            ListVersion::NotOlderThan(revision) => (None, Some(revision)),
            ListVersion::Exact(revision) => (Some(revision), None),
        };
        // kube-apiserver's answer to a revision it has not reached
        // (storage.NewTooLargeResourceVersionError).
        let too_large = |requested: Revision, current: Revision| ApiError::Timeout {
            message: format!(
                "Timeout: Too large resource version: {requested}, current: {current}"
            ),
            causes: vec![Cause::new("ResourceVersionTooLarge", "", "Too large resource version")],
            retry_after: Some(1),
        };
        let store_error = |e: carrel_store::Error| match e {
            carrel_store::Error::Expired { .. } if params.continue_token.is_some() => {
                ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter.",
                )
            }
            carrel_store::Error::Expired { .. } => {
                ApiError::expired("The resourceVersion for the provided list is too old.")
            }
            carrel_store::Error::FutureRevision { requested, current } => {
                too_large(requested, current)
            }
            e => ApiError::from_store(e, target.rt.group, target.rt.plural, ""),
        };
        let mut items = Vec::new();
        let mut token = params.continue_token.clone();
        let revision;
        let next;
        // With a selector, keep reading pages until `limit` matches are found (as the watch
        // cache does) so that `limit` bounds the answer, not the scan. Every page is read at the
        // first one's revision, which the continue token carries.
        loop {
            let page = self
                .store
                .list(
                    &prefix,
                    &StoreListOptions {
                        limit: params.limit.map(|l| l.saturating_sub(items.len()).max(1)),
                        continue_token: token.clone(),
                        revision: exact.filter(|_| token.is_none()),
                    },
                )
                .map_err(store_error)?;
            for object in page.items {
                if !filtering || self.selected(target.rt, &decode(&object)?, params) {
                    items.push(object);
                }
            }
            let full = params.limit.is_some_and(|l| items.len() >= l);
            if page.continue_token.is_none() || full || !filtering {
                revision = page.revision;
                next = page.continue_token;
                break;
            }
            token = page.continue_token;
        }
        if let Some(minimum) = minimum.filter(|m| *m > revision) {
            return Err(too_large(minimum, revision));
        }
        Ok(Listed { items, revision, continue_token: next })
    }

    /// Whether an object passes a list's selectors.
    pub fn selected(&self, rt: &ResourceType, object: &Value, params: &ListParams) -> bool {
        params.labels.as_ref().is_none_or(|l| l.matches_object(object))
            && params
                .fields
                .as_ref()
                .is_none_or(|f| f.matches(rt.strategy.field_labels(rt), object))
    }

    /// WATCH from `after`: the store's stream of changes under the target's prefix.
    pub fn watch(&self, target: &Target<'_>, after: Revision) -> ApiResult<Watch> {
        let prefix = prefix_for(target.rt, target.namespace.as_deref());
        self.store
            .watch(&prefix, after)
            .map_err(|e| ApiError::from_store(e, target.rt.group, target.rt.plural, ""))
    }

    /// The newest revision.
    pub fn current_revision(&self) -> Revision {
        self.store.current_revision()
    }
}
