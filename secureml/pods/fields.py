"""Every field of a Pod that admission judges, classified as allowed, pinned or refused."""

from __future__ import annotations

from typing import Literal

FieldClass = Literal["allowed", "pinned", "refused"]
Classified = dict[str, tuple[FieldClass, str]]

POD_SPEC: Classified = {
    "activeDeadlineSeconds": ("allowed", "Argo sets the workflow's deadline"),
    "affinity": ("allowed", "secureml.nodeAffinity, secureml.podAffinityNamespaces"),
    "automountServiceAccountToken": ("allowed", "a token of the runner, or none"),
    "containers": ("allowed", "CONTAINER, secureml.tenantContainers, secureml.systemContainers"),
    "dnsConfig": ("refused", "secureml.podFields: KFP and Argo write none; it redirects names"),
    "dnsPolicy": ("pinned", "secureml.podFields: ClusterFirst, the API's default"),
    "enableServiceLinks": ("allowed", "service variables of the tenant's own namespace"),
    "ephemeralContainers": ("allowed", "KFP's/Argo's only: none (secureml.systemContainers)"),
    "evictionResponders": (
        "allowed",
        "1.37 alpha (EvictionRequestAPI, off by default: the API server drops it); where enabled "
        "a responder only delays an eviction through the API, each passed over after its "
        "heartbeat deadline; not in 1.34-1.36's schemas, so no rule serving them can name it",
    ),
    "hostAliases": ("refused", "secureml.podFields: rewrites /etc/hosts of every container"),
    "hostIPC": ("refused", "pss.hostNamespaces"),
    "hostNetwork": ("refused", "pss.hostNamespaces"),
    "hostPID": ("refused", "pss.hostNamespaces"),
    "hostUsers": ("allowed", "pss.*, secureml.runAsNonRoot"),
    "hostname": ("allowed", "the pod's own hostname"),
    "hostnameOverride": ("refused", "secureml.podFields: KFP and Argo write none"),
    "imagePullSecrets": ("allowed", "the tenant's own Secrets; images still pass the image policy"),
    "initContainers": ("allowed", "KFP's/Argo's/the platform's only (secureml.tenantContainers)"),
    "nodeName": ("refused", "secureml.nodeName"),
    "nodeSelector": ("allowed", "secureml.nodeSelector, secureml.dedicatedPool"),
    "os": ("pinned", "secureml.linuxOnly: linux"),
    "overhead": ("pinned", "the RuntimeClass admission writes it (secureml.runtimeClass)"),
    "preemptionPolicy": ("pinned", "the Priority admission writes the class's"),
    "priority": ("pinned", "the Priority admission writes the class's"),
    "priorityClassName": ("allowed", "secureml.priorityClass"),
    "readinessGates": ("refused", "secureml.podFields: KFP and Argo write none"),
    "resourceClaims": ("allowed", "secureml.resourceClaims, secureml.claimCount"),
    "resources": ("refused", "secureml.podFields: pod-level resources; KFP writes per container"),
    "restartPolicy": ("pinned", "secureml.noRestart: Never"),
    "runtimeClassName": ("allowed", "secureml.runtimeClass"),
    "schedulerName": ("allowed", "secureml.schedulerName"),
    "schedulingGates": ("refused", "secureml.podFields: KFP and Argo write none"),
    "schedulingGroup": (
        "allowed",
        "1.36 alpha gang scheduling of the tenant's own pods; not in 1.34's schema, so no rule "
        "can name it in a policy that also serves 1.34",
    ),
    "securityContext": ("allowed", "POD_SECURITY_CONTEXT"),
    "serviceAccount": ("pinned", "secureml.serviceAccount"),
    "serviceAccountName": ("pinned", "secureml.serviceAccount"),
    "setHostnameAsFQDN": ("allowed", "the pod's own hostname"),
    "shareProcessNamespace": (
        "refused",
        "secureml.podFields: main would see KFP's and Argo's processes (and they main's)",
    ),
    "subdomain": ("allowed", "the pod's own DNS name"),
    "terminationGracePeriodSeconds": ("allowed", "Argo may set it"),
    "tolerations": ("allowed", "secureml.tolerations"),
    "topologySpreadConstraints": ("allowed", "the tenant's own pods only (no namespace field)"),
    "volumes": ("allowed", "VOLUME, secureml.mountPaths and the volume rules"),
    "workloadRef": (
        "allowed",
        "1.35 alpha gang scheduling (GenericWorkload, off by default) of the tenant's own pods, "
        "a Workload of the pod's namespace; 1.36 names it schedulingGroup",
    ),
}

CONTAINER: Classified = {
    "args": ("pinned", "secureml.launcherArgv"),
    "command": ("pinned", "secureml.launcherArgv"),
    "env": ("allowed", "ENV_VAR_SOURCE, secureml.launcherEnv, .interpreterEnv, .forbiddenEnv"),
    "envFrom": ("allowed", "secureml.envFrom: a prefix that forms no forbidden name"),
    "image": ("allowed", "secureml.imageRegistry, secureml.imageDigest, the image policy"),
    "imagePullPolicy": ("allowed", "any"),
    "lifecycle": ("allowed", "secureml.noExecHandlers: no exec hook"),
    "livenessProbe": ("allowed", "secureml.noExecHandlers: no exec probe"),
    "name": ("pinned", "secureml.tenantContainers: main (a trainer node's: node)"),
    "ports": ("allowed", "pss.hostPorts: no host port"),
    "readinessProbe": ("allowed", "secureml.noExecHandlers: no exec probe"),
    "resizePolicy": (
        "pinned",
        "secureml.podFields: restartPolicy NotRequired only; RestartContainer would re-run main "
        "on a resize from the emptyDirs its first run could write",
    ),
    "resources": ("allowed", "RESOURCE_REQUIREMENTS, the GPU rules"),
    "restartPolicy": ("refused", "secureml.noRestart"),
    "restartPolicyRules": ("refused", "secureml.noRestart"),
    "securityContext": ("allowed", "SECURITY_CONTEXT"),
    "startupProbe": ("allowed", "secureml.noExecHandlers: no exec probe"),
    "stdin": ("allowed", "an attached stdin runs nothing"),
    "stdinOnce": ("allowed", "an attached stdin runs nothing"),
    "targetContainerName": ("refused", "no tenant ephemeral container (secureml.tenantContainers)"),
    "terminationMessagePath": (
        "pinned",
        "secureml.podFields: /dev/termination-log; the kubelet mounts a writable file there, "
        "over /etc/ld.so.preload or the launcher if the path names them",
    ),
    "terminationMessagePolicy": ("allowed", "File or FallbackToLogsOnError"),
    "tty": ("allowed", "a terminal runs nothing"),
    "volumeDevices": ("refused", "secureml.mountPaths"),
    "volumeMounts": ("allowed", "VOLUME_MOUNT, secureml.mountPaths"),
    "workingDir": ("refused", "secureml.interpreterEnv"),
}

POD_SECURITY_CONTEXT: Classified = {
    "appArmorProfile": ("allowed", "pss.appArmorProfile: RuntimeDefault or Localhost"),
    "fsGroup": ("allowed", "secureml.groupNotRoot"),
    "fsGroupChangePolicy": ("allowed", "ownership of the pod's own volumes"),
    "runAsGroup": ("allowed", "secureml.groupNotRoot"),
    "runAsNonRoot": ("allowed", "pss.runAsNonRoot, secureml.runAsNonRoot"),
    "runAsUser": ("allowed", "pss.runAsUser"),
    "seLinuxChangePolicy": ("allowed", "relabelling of the pod's own volumes"),
    "seLinuxOptions": ("allowed", "pss.seLinuxOptions"),
    "seccompProfile": ("allowed", "pss.seccompProfile_restricted"),
    "supplementalGroups": ("allowed", "secureml.groupNotRoot"),
    "supplementalGroupsPolicy": ("allowed", "Merge or Strict: groups of the image, not more"),
    "sysctls": ("allowed", "pss.sysctls: the safe set"),
    "windowsOptions": ("refused", "pss.windowsHostProcess, secureml.linuxOnly"),
}

SECURITY_CONTEXT: Classified = {
    "allowPrivilegeEscalation": ("pinned", "pss.allowPrivilegeEscalation: false"),
    "appArmorProfile": ("allowed", "pss.appArmorProfile"),
    "capabilities": ("pinned", "pss.capabilities_restricted: drop ALL"),
    "privileged": ("refused", "pss.privileged"),
    "procMount": ("pinned", "pss.procMount: Default"),
    "readOnlyRootFilesystem": ("pinned", "secureml.readOnlyRootFilesystem: true"),
    "runAsGroup": ("allowed", "secureml.groupNotRoot"),
    "runAsNonRoot": ("pinned", "secureml.runAsNonRoot: true"),
    "runAsUser": ("allowed", "pss.runAsUser: not 0"),
    "seLinuxOptions": ("allowed", "pss.seLinuxOptions"),
    "seccompProfile": ("allowed", "pss.seccompProfile_restricted"),
    "windowsOptions": ("refused", "pss.windowsHostProcess, secureml.linuxOnly"),
}

ENV_VAR_SOURCE: Classified = {
    "configMapKeyRef": ("allowed", "secureml.forbiddenEnv judges the name, whatever the source"),
    "fieldRef": ("allowed", "the pod's own fields"),
    "fileKeyRef": (
        "refused",
        "secureml.podFields: a value read from a file another container wrote, after admission",
    ),
    "resourceFieldRef": ("allowed", "the container's own resources"),
    "secretKeyRef": ("allowed", "the tenant's own Secrets"),
}

VOLUME_MOUNT: Classified = {
    "bindMountOptions": ("allowed", "1.37 alpha: noexec, nodev, nosuid only, which take rights"),
    "mountPath": ("allowed", "secureml.mountPaths"),
    "mountPropagation": ("allowed", "HostToContainer only without privilege (Pod validation)"),
    "name": ("allowed", "secureml.mountPaths"),
    "readOnly": ("allowed", "secureml.mountPaths"),
    "recursiveReadOnly": ("allowed", "read-only, deeper"),
    "subPath": ("allowed", "secureml.mountPaths"),
    "subPathExpr": ("allowed", "secureml.mountPaths: never at a platform mount"),
}

RESOURCE_REQUIREMENTS: Classified = {
    "claims": ("allowed", "secureml.claimHolders: main only"),
    "limits": ("allowed", "secureml.resourceName, the GPU rules"),
    "requests": ("allowed", "secureml.resourceName, the GPU rules"),
}

_VOLUME_SOURCES_ALLOWED = {
    "configMap": "the tenant's own ConfigMaps (secureml.mountPaths places them)",
    "csi": "secureml.csiVolume: the platform's SPIFFE socket only",
    "downwardAPI": "the pod's own fields",
    "emptyDir": "scratch and KFP's and Argo's folders",
    "ephemeral": "secureml.ephemeralVolume: no volumeName",
    "image": "secureml.imageVolume",
    "persistentVolumeClaim": "the tenant's own claims",
    "projected": (
        "the pod's own token, ConfigMaps, Secrets, downward API, trust bundles and (1.34+ alpha) "
        "a certificate for the pod's own service account: nothing another identity holds"
    ),
    "secret": "the tenant's own Secrets",
}
_VOLUME_SOURCES_REFUSED = (
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "iscsi",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
)
VOLUME: Classified = {
    "name": ("allowed", "secureml.mountPaths"),
    **{k: ("allowed", v) for k, v in _VOLUME_SOURCES_ALLOWED.items()},
    **{k: ("refused", "pss.restrictedVolumes") for k in _VOLUME_SOURCES_REFUSED},
}

# Schema name (io.k8s.api.core.v1.<name>) -> its classification.
CLASSIFIED: dict[str, Classified] = {
    "PodSpec": POD_SPEC,
    "Container": CONTAINER,
    "EphemeralContainer": CONTAINER,
    "PodSecurityContext": POD_SECURITY_CONTEXT,
    "SecurityContext": SECURITY_CONTEXT,
    "EnvVarSource": ENV_VAR_SOURCE,
    "VolumeMount": VOLUME_MOUNT,
    "ResourceRequirements": RESOURCE_REQUIREMENTS,
    "Volume": VOLUME,
}
# Pod fields `secureml.podFields` refuses (the others of class `refused` have their own rule).
REFUSED_POD_FIELDS = (
    "dnsConfig",
    "hostAliases",
    "hostnameOverride",
    "readinessGates",
    "resources",
    "schedulingGates",
    "shareProcessNamespace",
)
DNS_POLICY = "ClusterFirst"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"


def unclassified(schemas: dict[str, dict[str, object]]) -> list[str]:
    """`Type.field` for every field of a classified type in `schemas` (an OpenAPI
    `components.schemas`, keyed `io.k8s.api.core.v1.<Type>`) that the table does not list; and
    `Type` for a classified type the schemas lack."""
    missing: list[str] = []
    for name, table in CLASSIFIED.items():
        schema = schemas.get(f"io.k8s.api.core.v1.{name}")
        if not isinstance(schema, dict):
            missing.append(name)
            continue
        properties = schema.get("properties", {})
        assert isinstance(properties, dict)
        missing += [f"{name}.{field}" for field in sorted(properties) if field not in table]
    return missing
