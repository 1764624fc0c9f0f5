-- Argo CD health check for streamconsumer.io/StreamConsumer.
-- Install: resource.customizations.health.streamconsumer.io_StreamConsumer in argocd-cm.
-- The operator's status follows kstatus: observedGeneration is the generation whose
-- workers run (or that got a verdict), Reconciling says work is under way, Stalled that
-- someone must act. So: Progressing while deleting, until the current generation is
-- observed, and while reconciling; Degraded when stalled or degraded; Healthy when Ready
-- (running, paused, or scaled to zero); Progressing otherwise.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.metadata.deletionTimestamp ~= nil then
  hs.message = "Deleting: the workers hand their shards back first"
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end
local found = {}
for _, condition in ipairs(obj.status.conditions) do
  found[condition.type] = condition
end
local function said(condition)
  return condition.reason .. ": " .. (condition.message or "")
end
for _, kind in ipairs({"Stalled", "Degraded"}) do
  if found[kind] ~= nil and found[kind].status == "True" then
    hs.status = "Degraded"
    hs.message = said(found[kind])
    return hs
  end
end
if found.Reconciling ~= nil and found.Reconciling.status == "True" then
  hs.message = said(found.Reconciling)
  return hs
end
if found.Ready ~= nil then
  if found.Ready.status == "True" then
    hs.status = "Healthy"
  end
  hs.message = said(found.Ready)
end
return hs
