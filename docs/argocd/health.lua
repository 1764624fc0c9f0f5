-- Argo CD health check for streamconsumer.io/StreamConsumer.
-- Install: resource.customizations.health.streamconsumer.io_StreamConsumer in argocd-cm.
-- Healthy when Ready is True for the current generation; Degraded when the operator
-- says so (e.g. the stream is unavailable); Progressing otherwise.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Degraded" and condition.status == "True" then
    hs.status = "Degraded"
    hs.message = condition.reason .. ": " .. (condition.message or "")
    return hs
  end
end
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Ready" then
    if condition.status == "True" then
      hs.status = "Healthy"
    end
    hs.message = condition.reason .. ": " .. (condition.message or "")
    return hs
  end
end
return hs
