//! The pod intake window on the HTTP side: a new pod of a cluster served with an intake waits for
//! room before it is stored, and the room is held until the syncer takes the pod up.

use serde_json::Value;

use crate::intake::{PodIntake, Room};

use super::Server;

/// Room in the server's pod intake for a pod about to be stored (none without an intake);
/// dropping it gives it back.
pub(super) async fn pod_room(server: &Server) -> Option<(&PodIntake, &str, Room)> {
    let (intake, tenant) = server.pod_intake.get()?;
    Some((intake, tenant, intake.enter(tenant).await))
}

/// Keep `room` until the syncer takes up the pod `created`.
pub(super) fn hold_pod_room(room: Option<(&PodIntake, &str, Room)>, created: &Value) {
    if let Some((intake, tenant, room)) = room {
        let at = |p: &str| created.pointer(p).and_then(Value::as_str).unwrap_or_default();
        intake.hold(tenant, at("/metadata/namespace"), at("/metadata/name"), room);
    }
}
